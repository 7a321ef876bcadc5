// `weft perplexity`: the perplexity of a model on a text file, with a sliding window.
//
// Perplexity is exp of the mean negative log-likelihood of every token but the first, each
// scored once: windows of --window tokens start every --stride tokens, and a window scores
// only the tokens after the end of the previous window, so each token is predicted from at
// least window - stride tokens of context. tools/train/train.py computes PyTorch's figure the
// same way; the two agree within 1% (models/weft-tiny/README.md).

#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "actors/device_backend.hpp"
#include "kernels/cpu/quant/format.hpp"
#include "loaders/mapped_file.hpp"
#include "loaders/model_loader.hpp"
#include "loaders/tokenizer_json.hpp"
#include "runtime/model/perplexity.hpp"
#include "tools/weft/commands.hpp"
#include "tools/weft/default_model.hpp"
#include "tools/weft/kv_compress_option.hpp"
#include "tools/weft/quantize_option.hpp"

namespace weft::cli {
namespace {

struct PerplexityOptions {
  std::string model_dir;
  std::string quantize;  // --quantize: a block format name, empty for none
  std::string spec_file;
  std::string file;
  int window = 512;
  int stride = 256;
  int chunk = 256;
  unsigned threads = 0;
  int page_size = 16;
  std::string kv_cache_dtype = "auto";
  KvCompressOptions kv_compress;
  std::string format = "text";
};

// Prints progress on stderr: in place on a terminal, every 10% otherwise.
class Progress {
 public:
  void update(std::size_t done, std::size_t total) {
    const int percent = static_cast<int>(100 * done / std::max<std::size_t>(total, 1));
    if (tty_) {
      std::fprintf(stderr, "\rperplexity: %3d%%  %zu/%zu tokens", percent, done, total);
      if (done == total) std::fputc('\n', stderr);
    } else if (percent >= next_percent_) {
      std::fprintf(stderr, "perplexity: %d%% (%zu/%zu tokens)\n", percent, done, total);
      next_percent_ = percent / 10 * 10 + 10;
    }
  }

 private:
  bool tty_ = isatty(STDERR_FILENO) != 0;
  int next_percent_ = 10;
};

int run_perplexity(const PerplexityOptions& o) {
  auto fail = [](const std::string& message) {
    std::cerr << "weft perplexity: " << message << '\n';
    return 1;
  };
  // Perplexity runs on the CPU: auto is f32 there.
  auto kv_dtype = actors::resolve_kv_cache_dtype(o.kv_cache_dtype, actors::DeviceChoice{});
  if (!kv_dtype) return fail(std::string("--kv-cache-dtype: ") + kv_dtype.error().what());
  auto file = MappedFile::open(o.file);
  if (!file) return fail(file.error().what());

  LoadOptions load_options;
  load_options.spec_file = o.spec_file;
  if (!o.quantize.empty()) load_options.quantize = quant::parse_quant_type(o.quantize).value();
  auto loaded = load_model(o.model_dir, load_options);
  if (!loaded) return fail(loaded.error().what());
  const model::Model& model = loaded->model;
  auto tokenizer = loaders::load_tokenizer(o.model_dir);
  if (!tokenizer) return fail(tokenizer.error().what());

  // Special tokens are added as `tokenizers` adds them by default (a BOS for Llama-style
  // models, nothing for byte-level ones such as weft-tiny).
  auto encoded = tokenizer->tokenizer->encode(file->text(), /*add_special_tokens=*/true);
  if (!encoded) return fail(o.file + ": " + encoded.error().what());
  const std::vector<std::uint32_t>& ids = encoded.value();
  const std::size_t n = ids.size();

  cpu::ThreadPool pool(o.threads);
  model::PerplexityOptions options{o.window, o.stride, o.chunk, o.page_size, *kv_dtype};
  options.kv_compress = {o.kv_compress.rate, o.kv_compress.window,
                         o.kv_compress.heads == "variable" ? kv::KvCompressHeads::kVariable
                                                           : kv::KvCompressHeads::kUniform};
  Progress progress;
  auto result = model::sliding_window_perplexity(
      model, ids, options, pool,
      [&progress](std::size_t scored, std::size_t total) { progress.update(scored, total); });
  if (!result) return fail(result.error().what());
  const double ppl = result->perplexity;
  const std::size_t scored = result->tokens_scored;
  if (o.format == "json") {
    boost::json::object out{{"perplexity", ppl},
                            {"mean_nll", result->mean_nll},
                            {"tokens_scored", scored},
                            {"tokens", n},
                            {"window", o.window},
                            {"stride", o.stride},
                            {"kv_cache_dtype", kv_dtype_name(*kv_dtype)},
                            {"kv_compress_rate", o.kv_compress.rate},
                            {"kv_compress_window", o.kv_compress.window},
                            {"kv_compress_heads", o.kv_compress.heads},
                            {"file", o.file},
                            {"model", o.model_dir}};
    std::cout << boost::json::serialize(out) << '\n';
  } else {
    std::printf("perplexity %.4f over %zu tokens (window %d, stride %d)\n", ppl, scored, o.window,
                o.stride);
  }
  return 0;
}

}  // namespace

void add_perplexity_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "perplexity",
      "Perplexity of a model on a text file, with a sliding window: windows of --window tokens "
      "start every --stride tokens and each token is scored once, from at least "
      "window - stride tokens of context.");
  auto opts = std::make_shared<PerplexityOptions>();
  add_model_option(cmd, opts->model_dir);
  add_quantize_option(cmd, opts->quantize);
  add_kv_compress_options(cmd, opts->kv_compress);
  cmd->add_option("--file", opts->file, "UTF-8 text file to score")->required();
  cmd->add_option("--spec", opts->spec_file,
                  "model specification file (default: chosen by config.json's architectures, "
                  "then model_type, from config/models/)");
  cmd->add_option("--window", opts->window, "tokens per window (at most the model's context)")
      ->capture_default_str()
      ->check(CLI::Range(2, 1 << 20));
  cmd->add_option("--stride", opts->stride, "tokens between window starts")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--chunk", opts->chunk, "tokens per forward step (bounds the logits' memory)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--threads", opts->threads, "CPU threads (0: one per core)")
      ->capture_default_str();
  cmd->add_option("--page-size", opts->page_size, "KV cache page size in tokens")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--kv-cache-dtype", opts->kv_cache_dtype, kKvCacheDtypeHelp)
      ->capture_default_str();
  cmd->add_option("--format", opts->format, "text: one line; json: one object")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json"}));
  cmd->callback([opts, &exit_code] { exit_code = run_perplexity(*opts); });
}

}  // namespace weft::cli
