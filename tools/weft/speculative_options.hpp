#pragma once
// The speculative-decoding options `weft generate`, `weft bench` and `weft serve` share
// (docs/speculative.md), and generation through the engine for `weft generate --speculate`.

#include <CLI/CLI.hpp>
#include <string>

#include "weft/engine.hpp"

namespace weft::cli {

struct SpeculativeOptions {
  std::string speculate;  // empty: off; prompt-lookup; draft
  std::string draft_model;
  std::string draft_device = "auto";
  int spec_tokens = 4;
  int spec_width = 1;
  int spec_step_budget = 32;
};

void add_speculative_options(CLI::App* cmd, SpeculativeOptions& o);
void apply_speculative_options(const SpeculativeOptions& o, EngineConfig& config);

// Runs one request through an Engine (which `--speculate` and `--kv-compress-rate` need),
// streaming its text to stdout (or, with json, one object per delta and a summary with the
// acceptance and compression figures). Returns the process exit code.
int generate_with_engine(EngineConfig config, GenerateRequest request, bool json);

}  // namespace weft::cli
