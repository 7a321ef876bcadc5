// `weft embed`: sentence embeddings from an encoder-only model (BERT family), batched through
// the Engine; one JSON object per input on standard output. docs/embeddings.md.

#include <boost/asio/use_future.hpp>
#include <boost/json.hpp>
#include <charconv>
#include <future>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "actors/device_backend.hpp"
#include "tools/weft/commands.hpp"
#include "tools/weft/default_model.hpp"
#include "tools/weft/json_lines.hpp"
#include "weft/engine.hpp"
#include "weft/runtime.hpp"

namespace weft::cli {
namespace {

namespace asio = boost::asio;

struct EmbedOptions {
  std::string model_dir;
  std::string spec_file;
  std::vector<std::string> texts;
  bool jsonl = false;
  std::string pooling = "model";
  std::optional<bool> normalize;
  unsigned threads = 0;
  int max_tokens_per_step = 2048;
  std::string device = "auto";
  bool truncate = false;
};

// The shortest text that reads back as the same float.
void append_float(std::string& out, float f) {
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, f);
  out.append(buffer, end);
}

int run_embed(const EmbedOptions& o) {
  auto fail = [](const std::string& message) {
    std::cerr << "weft embed: " << message << '\n';
    return 1;
  };
  // One request per input, all submitted before any is awaited, so the engine batches them.
  std::vector<EmbedRequest> requests;
  auto add_request = [&](EmbedRequest r) {
    if (o.pooling == "mean") r.pooling = EmbeddingPooling::kMean;
    if (o.pooling == "cls") r.pooling = EmbeddingPooling::kCls;
    r.normalize = o.normalize;
    r.truncate = o.truncate;
    requests.push_back(std::move(r));
  };
  if (!o.texts.empty()) {
    for (const auto& t : o.texts) {
      EmbedRequest r;
      r.texts = {t};
      add_request(std::move(r));
    }
  } else if (!o.jsonl) {
    EmbedRequest r;
    r.texts = {
        std::string((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>())};
    add_request(std::move(r));
  } else {
    std::string line;
    for (std::size_t number = 1; std::getline(std::cin, line); ++number) {
      const auto where = "line " + std::to_string(number) + ": ";
      const auto value = parse_json_line(line, "one JSON string or array of token ids per line");
      if (!value) return fail(where + value.error().what());
      EmbedRequest r;
      if (value->is_string()) {
        r.texts = {std::string(value->get_string())};
      } else if (value->is_array()) {
        std::vector<std::int32_t> ids;
        for (const auto& v : value->get_array()) {
          if (!v.is_int64() || v.get_int64() < 0 || v.get_int64() > (1 << 30)) {
            return fail(where + "expected an array of token ids (non-negative integers), got " +
                        boost::json::serialize(v));
          }
          ids.push_back(static_cast<std::int32_t>(v.get_int64()));
        }
        r.token_ids = {std::move(ids)};
      } else {
        return fail(where + "expected a JSON string or an array of token ids, got " +
                    boost::json::serialize(*value));
      }
      add_request(std::move(r));
    }
  }
  if (requests.empty()) return fail("no input (give texts as arguments or lines with --jsonl)");

  Runtime runtime(RuntimeOptions{.worker_threads = 2});
  EngineConfig config;
  config.model_dir = o.model_dir;
  config.spec_file = o.spec_file;
  config.cpu_threads = o.threads;
  config.max_tokens_per_step = o.max_tokens_per_step;
  auto device = actors::parse_device(o.device);
  if (!device) return fail(std::string("--device: ") + device.error().what());
  config.device = actors::device_name(*device);
  try {
    Engine engine(runtime.executor(), config);
    if (!engine.embeds()) {
      return fail(o.model_dir +
                  " holds a decoder-only model; weft embed needs an encoder-only one (BERT, "
                  "RoBERTa, XLM-R)");
    }
    std::vector<std::future<EmbedResult>> results;
    for (auto& r : requests)
      results.push_back(engine.embed(std::move(r), asio::use_future));
    int code = 0;
    for (std::size_t i = 0; i < results.size(); ++i) {
      try {
        const EmbedResult r = results[i].get();
        std::string line = "{\"index\":" + std::to_string(i) +
                           ",\"tokens\":" + std::to_string(r.prompt_tokens) + ",\"embedding\":[";
        const auto& v = r.embeddings.at(0);
        for (std::size_t j = 0; j < v.size(); ++j) {
          if (j) line.push_back(',');
          append_float(line, v[j]);
        }
        line += "]}\n";
        std::cout << line;
      } catch (const Error& e) {
        const std::string what = e.what();
        // input[0] of a one-input request is the i-th input of the command.
        const std::string prefix = "input[0]: ";
        std::cerr << "weft embed: input " << i + 1 << ": "
                  << (what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what) << '\n';
        code = 1;
      }
    }
    std::cout.flush();
    return code;
  } catch (const Error& e) {
    return fail(e.what());
  }
}

}  // namespace

void add_embed_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<EmbedOptions>();
  auto* cmd = app.add_subcommand(
      "embed",
      "Embed texts with an encoder-only model (BERT, RoBERTa, XLM-R): one JSON object per input "
      "on standard output, {\"index\", \"tokens\", \"embedding\": [floats]}. Inputs are the "
      "TEXT arguments; without any, standard input as one text, or with --jsonl one JSON "
      "string (a text) or array of token ids per line. Every input runs with its special "
      "tokens ([CLS] ... [SEP]), all batched together.");
  add_model_option(cmd, o->model_dir);
  cmd->add_option("texts", o->texts, "texts to embed, one vector each");
  cmd->add_option("--spec", o->spec_file,
                  "model spec file (default: chosen by config.json's architectures)");
  cmd->add_flag("--jsonl", o->jsonl,
                "read one JSON string or array of token ids per line of standard input");
  cmd->add_option("--pooling", o->pooling,
                  "mean (every token's last hidden state averaged), cls (the first token's), or "
                  "model (the model folder's 1_Pooling/config.json, else the spec's default)")
      ->check(CLI::IsMember({"model", "mean", "cls"}))
      ->capture_default_str();
  cmd->add_flag("--normalize,!--no-normalize", o->normalize,
                "L2-normalize each vector (default: as the folder's modules.json says)");
  cmd->add_option("--device", o->device,
                  "where to run: auto (GPU 0 when one is visible, else cpu), cpu, cuda or cuda:N "
                  "(bf16 on the GPU)")
      ->capture_default_str();
  cmd->add_flag("--truncate", o->truncate,
                "cut an input longer than the model's positions to fit them (keeping its first "
                "tokens and the special tokens around it) instead of failing on it");
  cmd->add_option("--threads", o->threads,
                  "CPU threads for the forward pass (device cpu); 0: one per core")
      ->capture_default_str();
  cmd->add_option("--max-tokens-per-step", o->max_tokens_per_step,
                  "tokens one forward pass packs from the inputs (an input longer than this "
                  "still runs, alone)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->callback([o, &exit_code] { exit_code = run_embed(*o); });
}

}  // namespace weft::cli
