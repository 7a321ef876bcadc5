#pragma once
// `--kv-compress-rate R` and `--kv-compress-window W` for the commands that run a model
// (generate, serve, bench, perplexity): KV-Compress (docs/kv-compress.md).

#include <CLI/CLI.hpp>
#include <string>

namespace weft::cli {

struct KvCompressOptions {
  double rate = 0.0;  // 0: off
  int window = 16;
  std::string heads = "uniform";  // or "variable" (kv::KvCompressHeads)
};

// Adds the three options to `cmd` (--kv-compress-heads too). A rate outside [0, 1), a window
// outside [1, 4096] or heads other than uniform/variable is a parse error naming the option
// and the value.
void add_kv_compress_options(CLI::App* cmd, KvCompressOptions& options);

}  // namespace weft::cli
