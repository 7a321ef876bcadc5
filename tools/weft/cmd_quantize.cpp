// `weft quantize`: writes a copy of a model folder whose weight matrices are in a block
// quantization format (loaders/quantized_folder.hpp, docs/quantization.md); Weft loads the
// copy directly.

#include <cstdio>
#include <iostream>
#include <string>

#include "kernels/cpu/quant/format.hpp"
#include "loaders/model_loader.hpp"
#include "loaders/quantized_folder.hpp"
#include "tools/weft/commands.hpp"
#include "tools/weft/default_model.hpp"
#include "tools/weft/load_progress.hpp"

namespace weft::cli {
namespace {

struct QuantizeOptions {
  std::string model_dir;
  std::string spec_file;
  std::string format;
  std::string out_dir;
  unsigned threads = 0;
};

int run_quantize(const QuantizeOptions& o) {
  auto fail = [](const std::string& message) {
    std::cerr << "weft quantize: " << message << '\n';
    return 1;
  };
  auto type = quant::parse_quant_type(o.format);
  if (!type) return fail(std::string("--format: ") + type.error().what());
  LoadOptions load_options;
  load_options.spec_file = o.spec_file;
  auto loaded = load_model(o.model_dir, load_options);  // checks every tensor against the spec
  if (!loaded) return fail(loaded.error().what());
  cpu::ThreadPool pool(o.threads);
  const std::string name(quant::quant_info(*type).name);
  auto stats =
      write_quantized_folder(o.model_dir, *loaded, *type, o.out_dir, &pool, upload_progress(name));
  if (!stats) return fail(stats.error().what());
  // The folder must load as it is: bind it once before saying it is done.
  auto reloaded = load_model(o.out_dir, load_options);
  if (!reloaded)
    return fail(std::string("the written folder does not load: ") + reloaded.error().what());
  std::printf(
      "wrote %s: %zu tensors, %zu of them %s; model.safetensors %.2f MB (weights were "
      "%.2f MB)\n",
      o.out_dir.c_str(), stats->tensors, stats->quantized_tensors, name.c_str(),
      static_cast<double>(stats->written_bytes) / 1e6,
      static_cast<double>(stats->source_bytes) / 1e6);
  return 0;
}

}  // namespace

void add_quantize_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "quantize",
      "Write a copy of a model folder with its weight matrices in a block quantization format "
      "(docs/quantization.md); the copy loads like any model folder.");
  auto opts = std::make_shared<QuantizeOptions>();
  add_model_option(cmd, opts->model_dir);
  cmd->add_option("--format", opts->format,
                  "block format: " + quant::supported_quant_names() +
                      " (short: q8, q6, q5, q4, q3h, q3, q2)")
      ->required();
  cmd->add_option("--out", opts->out_dir, "folder to write (new, or empty)")->required();
  cmd->add_option("--spec", opts->spec_file,
                  "model specification file (default: chosen by config.json's architectures)");
  cmd->add_option("--threads", opts->threads, "CPU threads (0: one per core)")
      ->capture_default_str();
  cmd->callback([opts, &exit_code] { exit_code = run_quantize(*opts); });
}

}  // namespace weft::cli
