// `weft tokenize`: text to token ids with a Hugging Face tokenizer (tokenizer.json or a model
// folder), exactly as `tokenizers` encodes.

#include <boost/json.hpp>
#include <iostream>
#include <iterator>
#include <string>

#include "loaders/tokenizer_json.hpp"
#include "tools/weft/commands.hpp"
#include "tools/weft/json_lines.hpp"

namespace weft::cli {
namespace {

struct TokenizeOptions {
  std::string tokenizer;
  bool add_special_tokens = false;
  bool jsonl = false;
};

void print_ids(const std::vector<std::uint32_t>& ids) {
  std::string line = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) line.push_back(',');
    line += std::to_string(ids[i]);
  }
  line += "]\n";
  std::cout << line;
}

int run_tokenize(const TokenizeOptions& options) {
  auto loaded = loaders::load_tokenizer(options.tokenizer);
  if (!loaded) {
    std::cerr << "weft tokenize: " << loaded.error().what() << '\n';
    return 1;
  }
  const auto& tok = *loaded->tokenizer;
  if (!options.jsonl) {
    const std::string text((std::istreambuf_iterator<char>(std::cin)),
                           std::istreambuf_iterator<char>());
    auto ids = tok.encode(text, options.add_special_tokens);
    if (!ids) {
      std::cerr << "weft tokenize: standard input: " << ids.error().what() << '\n';
      return 1;
    }
    print_ids(*ids);
    return 0;
  }
  std::string line;
  for (std::size_t number = 1; std::getline(std::cin, line); ++number) {
    const auto value = parse_json_line(line, "one JSON string per line");
    if (!value || !value->is_string()) {
      std::cerr << "weft tokenize: line " << number << ": "
                << (value ? "expected one JSON string per line, got another JSON value"
                          : value.error().what())
                << '\n';
      return 1;
    }
    const auto& text = value->get_string();
    auto ids = tok.encode(std::string_view(text.data(), text.size()), options.add_special_tokens);
    if (!ids) {
      std::cerr << "weft tokenize: line " << number << ": " << ids.error().what() << '\n';
      return 1;
    }
    print_ids(*ids);
  }
  return 0;
}

}  // namespace

void add_tokenize_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<TokenizeOptions>();
  auto* cmd = app.add_subcommand(
      "tokenize",
      "Encode text into token ids with a Hugging Face tokenizer. With --jsonl, reads one JSON "
      "string per line of standard input and writes one JSON array of ids per line; without, "
      "encodes all of standard input as one text.");
  cmd->add_option("--tokenizer", options->tokenizer,
                  "tokenizer.json, or a model folder holding one")
      ->required();
  cmd->add_flag("--add-special-tokens", options->add_special_tokens,
                "Add the post-processor's special tokens (BOS, [CLS] ... [SEP])");
  cmd->add_flag("--jsonl", options->jsonl, "JSON lines in and out");
  cmd->callback([options, &exit_code] { exit_code = run_tokenize(*options); });
}

}  // namespace weft::cli
