#pragma once
// The options that cut a model by layers (docs/parallel.md), for generate, serve and bench:
// --pipeline-parallel M (M processes, or M x N with --tensor-parallel N, started by mpirun),
// --micro-batches, and the GPU/CPU hybrid: --cpu-layers K or --gpu-memory-budget-mb.

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "actors/device_backend.hpp"
#include "runtime/model/model.hpp"
#include "weft/error.hpp"

namespace weft::cli {

struct PipelineOptions {
  int stages = 1;
  int micro_batches = 0;  // 0: one per stage
  int pp_groups = 0;      // serve, bench: sequence groups in flight (0: one per stage)
  int cpu_layers = 0;
  std::int64_t gpu_memory_budget_mb = 0;  // 0: none

  int micro_batch_count() const { return micro_batches > 0 ? micro_batches : stages; }
  bool hybrid() const { return cpu_layers > 0 || gpu_memory_budget_mb > 0; }
};

void add_pipeline_options(CLI::App* cmd, PipelineOptions& options);
// --pp-groups, for the engine's commands (serve, bench).
void add_pp_groups_option(CLI::App* cmd, PipelineOptions& options);

// The message when the processes mpirun started are not tensor_parallel x stages.
std::string wrong_process_count(const std::string& command, int tensor_parallel, int stages,
                                int started);

// The layers --cpu-layers (or the budget) leaves on the CPU for `model` on `device`, and with
// the budget the GPU's page count (0: not set by the budget). Errors name the option.
struct HybridChoice {
  int cpu_layers = 0;
  int gpu_pages = 0;
};
Result<HybridChoice> choose_cpu_layers(const PipelineOptions& options, const model::Model& model,
                                       const model::KvLayout& layout,
                                       const actors::DeviceChoice& device);

}  // namespace weft::cli
