#include "tools/weft/kv_compress_option.hpp"

#include <string>

#include "runtime/kv/kv_compress.hpp"

namespace weft::cli {

void add_kv_compress_options(CLI::App* cmd, KvCompressOptions& options) {
  cmd->add_option("--kv-compress-rate", options.rate,
                  "KV-Compress: after a prompt is prefilled, each layer's kv heads evict this "
                  "share of their cached tokens (whole pages), those the last "
                  "--kv-compress-window prompt tokens attended to least; in [0, 1), 0: off "
                  "(docs/kv-compress.md)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            double rate = 0;
            try {
              std::size_t used = 0;
              rate = std::stod(value, &used);
              if (used != value.size()) throw std::invalid_argument(value);
            } catch (const std::exception&) {
              return "\"" + value + "\" is not a number";
            }
            auto ok = kv::check(kv::KvCompressConfig{rate, 16});
            return ok ? std::string() : value + " is outside [0, 1) (0: off)";
          },
          "RATE"));
  cmd->add_option("--kv-compress-window", options.window,
                  "KV-Compress: the last prompt tokens whose attention scores the cache (always "
                  "kept); in [1, 4096]")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            int window = 0;
            try {
              std::size_t used = 0;
              window = std::stoi(value, &used);
              if (used != value.size()) throw std::invalid_argument(value);
            } catch (const std::exception&) {
              return "\"" + value + "\" is not an integer";
            }
            auto ok = kv::check(kv::KvCompressConfig{0.0, window});
            return ok ? std::string() : value + " is outside [1, 4096]";
          },
          "TOKENS"));
  cmd->add_option("--kv-compress-heads", options.heads,
                  "KV-Compress: how a layer's kv heads share the eviction: uniform (each evicts "
                  "the same count) or variable (per-head budgets: the least-attended pages' "
                  "worth go first, whichever head holds them; same pages freed; CPU backend)")
      ->capture_default_str()
      ->check(CLI::IsMember({"uniform", "variable"}));
}

}  // namespace weft::cli
