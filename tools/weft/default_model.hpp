#pragma once
// The model a command uses when --model is not given: $WEFT_MODEL if set, else weft-tiny, the
// small model that ships in the repository (models/weft-tiny), so that generate, serve,
// perplexity and bench work out of the box without downloading anything.

#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>

namespace weft::cli {

std::filesystem::path default_model_dir();

// Adds `--model DIR` to `cmd`, storing into `dir`; when the option is absent, `dir` holds
// default_model_dir().
CLI::Option* add_model_option(CLI::App* cmd, std::string& dir);

}  // namespace weft::cli
