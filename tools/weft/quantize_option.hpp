#pragma once
// `--quantize FORMAT` for the commands that load a model (generate, serve, bench,
// perplexity): quantize the weight matrices as they load (docs/quantization.md).

#include <CLI/CLI.hpp>
#include <string>

namespace weft::cli {

// Adds `--quantize FORMAT` to `cmd`, storing the name into `format` (empty: not given). An
// unknown name is a parse error that lists the supported ones.
CLI::Option* add_quantize_option(CLI::App* cmd, std::string& format);

}  // namespace weft::cli
