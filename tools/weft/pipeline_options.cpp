#include "tools/weft/pipeline_options.hpp"

#include "actors/pipeline_stages.hpp"

namespace weft::cli {

void add_pipeline_options(CLI::App* cmd, PipelineOptions& options) {
  cmd->add_option("--pipeline-parallel", options.stages,
                  "cut the model by layers into M stages, one per process started by mpirun "
                  "(with --tensor-parallel N: M x N processes, ranks stage * N + tp rank, each "
                  "stage's N ranks a group of their own, over NCCL on GPUs); each rank holds "
                  "only its layers and their KV; rank 0 samples (docs/parallel.md)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--micro-batches", options.micro_batches,
                  "with --pipeline-parallel: cut each step's batch into this many micro-batches "
                  "of whole sequences, so the stages work at once (0: one per stage; GPU "
                  "stages cut only into pieces of WEFT_PP_MICRO_TOKENS, 128, tokens or "
                  "more, docs/parallel.md)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--cpu-layers", options.cpu_layers,
                  "GPU/CPU hybrid in one process: run the last K layers and the lm head on the "
                  "CPU, their KV in host memory, the others on the GPU (docs/parallel.md)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--gpu-memory-budget-mb", options.gpu_memory_budget_mb,
                  "GPU/CPU hybrid: keep on the CPU the fewest last layers that let the GPU's "
                  "weights fit in 3/4 of this many MiB (its KV pages in the rest); 0: no budget")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40));
}

void add_pp_groups_option(CLI::App* cmd, PipelineOptions& options) {
  cmd->add_option("--pp-groups", options.pp_groups,
                  "with --pipeline-parallel: split the running sequences into N groups whose "
                  "steps are in the pipeline at once, so that while a later stage runs one "
                  "group's step the first runs another's (0: one group per stage; 1: one step at "
                  "a time; WEFT_PP_GROUPS_GPU=0 keeps GPU stages to one step at a time; give "
                  "every rank the same value; docs/parallel.md)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
}

std::string wrong_process_count(const std::string& command, int tensor_parallel, int stages,
                                int started) {
  const int ranks = tensor_parallel * stages;
  const std::string asked = stages == 1 ? "--tensor-parallel " + std::to_string(tensor_parallel)
                            : tensor_parallel == 1
                                ? "--pipeline-parallel " + std::to_string(stages)
                                : "--tensor-parallel " + std::to_string(tensor_parallel) +
                                      " x --pipeline-parallel " + std::to_string(stages);
  return asked + " needs " + std::to_string(ranks) + " processes, one per rank, but MPI started " +
         std::to_string(started) + ": launch with mpirun -np " + std::to_string(ranks) + " weft " +
         command + " ...";
}

Result<HybridChoice> choose_cpu_layers(const PipelineOptions& options, const model::Model& model,
                                       const model::KvLayout& layout,
                                       const actors::DeviceChoice& device) {
  HybridChoice choice;
  if (options.cpu_layers > 0 && options.gpu_memory_budget_mb > 0) {
    return Error(ErrorCode::kInvalidArgument,
                 "--cpu-layers and --gpu-memory-budget-mb both choose the CPU's layers; give one");
  }
  if (!device.cuda) {
    return Error(ErrorCode::kInvalidArgument,
                 std::string(options.cpu_layers > 0 ? "--cpu-layers" : "--gpu-memory-budget-mb") +
                     " keeps some layers on the CPU beside a GPU; on --device cpu every layer is "
                     "on the CPU already");
  }
  if (options.cpu_layers > 0) {
    choice.cpu_layers = options.cpu_layers;
    return choice;
  }
  auto split = actors::plan_gpu_cpu_split(model, layout, options.gpu_memory_budget_mb << 20);
  if (!split) {
    return Error(split.error().code(),
                 "--gpu-memory-budget-mb: " + std::string(split.error().what()));
  }
  choice.cpu_layers = split->cpu_layers;
  choice.gpu_pages = split->gpu_pages;
  return choice;
}

}  // namespace weft::cli
