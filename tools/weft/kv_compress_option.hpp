#pragma once
// `--kv-compress-rate R` and `--kv-compress-window W` for the commands that run a model
// (generate, serve, bench, perplexity): KV-Compress (docs/kv-compress.md).

#include <CLI/CLI.hpp>

namespace weft::cli {

struct KvCompressOptions {
  double rate = 0.0;  // 0: off
  int window = 16;
};

// Adds both options to `cmd`. A rate outside [0, 1) or a window outside [1, 4096] is a parse
// error naming the option and the value.
void add_kv_compress_options(CLI::App* cmd, KvCompressOptions& options);

}  // namespace weft::cli
