#pragma once
// Each subcommand of `weft` lives in its own cmd_<name>.cpp and registers itself here.
// A subcommand's callback does the work and stores the process exit code in `exit_code`;
// errors are printed to stderr as "weft <command>: <message>" and give exit code 1.

#include <CLI/CLI.hpp>

namespace weft::cli {

void add_version_command(CLI::App& app, int& exit_code);
void add_tokenize_command(CLI::App& app, int& exit_code);
void add_detokenize_command(CLI::App& app, int& exit_code);
void add_chat_template_command(CLI::App& app, int& exit_code);
void add_generate_command(CLI::App& app, int& exit_code);
void add_perplexity_command(CLI::App& app, int& exit_code);
void add_bench_command(CLI::App& app, int& exit_code);
void add_serve_command(CLI::App& app, int& exit_code);
void add_embed_command(CLI::App& app, int& exit_code);

// --kv-cache-dtype's help, the same on every command that takes it.
inline constexpr const char* kKvCacheDtypeHelp =
    "KV cache element type: auto (f32 on the CPU, bf16 on a GPU), f32, bf16, fp16 (CPU), int8 or "
    "fp8 (e4m3); int8 and fp8 store a scale per token and kv head and hold about twice bf16's "
    "tokens in the same memory (docs/engine.md#kv-cache-dtype)";
void add_quantize_command(CLI::App& app, int& exit_code);

}  // namespace weft::cli
