// `weft detokenize`: token ids back to text with a Hugging Face tokenizer, exactly as
// `tokenizers` decodes.

#include <boost/json.hpp>
#include <iostream>
#include <string>

#include "loaders/tokenizer_json.hpp"
#include "tools/weft/commands.hpp"
#include "tools/weft/json_lines.hpp"

namespace weft::cli {
namespace {

struct DetokenizeOptions {
  std::string tokenizer;
  bool skip_special_tokens = false;
  bool jsonl = false;
};

// Reads a JSON array of ids; the error says which element is wrong.
std::optional<std::vector<std::uint32_t>> parse_ids(const std::string& line, std::string& error) {
  const auto value = parse_json_line(line, "one JSON array of token ids per line");
  if (!value || !value->is_array()) {
    error = value ? "expected one JSON array of token ids per line, got another JSON value"
                  : value.error().what();
    return std::nullopt;
  }
  std::vector<std::uint32_t> ids;
  const auto& array = value->get_array();
  for (std::size_t i = 0; i < array.size(); ++i) {
    const auto& v = array[i];
    std::int64_t n = -1;
    if (v.is_int64()) n = v.get_int64();
    if (v.is_uint64() && v.get_uint64() <= 0xFFFFFFFFull)
      n = static_cast<std::int64_t>(v.get_uint64());
    if (n < 0 || n > 0xFFFFFFFFll) {
      error = "element " + std::to_string(i) + " is " + boost::json::serialize(v) +
              ", expected a token id (an integer from 0 to 4294967295)";
      return std::nullopt;
    }
    ids.push_back(static_cast<std::uint32_t>(n));
  }
  return ids;
}

int run_detokenize(const DetokenizeOptions& options) {
  auto loaded = loaders::load_tokenizer(options.tokenizer);
  if (!loaded) {
    std::cerr << "weft detokenize: " << loaded.error().what() << '\n';
    return 1;
  }
  const auto& tok = *loaded->tokenizer;
  std::string line;
  for (std::size_t number = 1; std::getline(std::cin, line); ++number) {
    std::string error;
    auto ids = parse_ids(line, error);
    if (!ids) {
      std::cerr << "weft detokenize: line " << number << ": " << error << '\n';
      return 1;
    }
    auto text = tok.decode(*ids, options.skip_special_tokens);
    if (!text) {
      std::cerr << "weft detokenize: line " << number << ": " << text.error().what() << '\n';
      return 1;
    }
    if (options.jsonl) {
      std::cout << boost::json::serialize(boost::json::string(*text)) << '\n';
    } else {
      std::cout << *text << '\n';
    }
  }
  return 0;
}

}  // namespace

void add_detokenize_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<DetokenizeOptions>();
  auto* cmd = app.add_subcommand(
      "detokenize",
      "Decode token ids into text with a Hugging Face tokenizer: one JSON array of ids per line "
      "of standard input; with --jsonl each result is written as a JSON string, without it as "
      "raw text.");
  cmd->add_option("--tokenizer", options->tokenizer,
                  "tokenizer.json, or a model folder holding one")
      ->required();
  cmd->add_flag("--skip-special-tokens", options->skip_special_tokens,
                "Leave special tokens out of the text");
  cmd->add_flag("--jsonl", options->jsonl, "Write one JSON string per line");
  cmd->callback([options, &exit_code] { exit_code = run_detokenize(*options); });
}

}  // namespace weft::cli
