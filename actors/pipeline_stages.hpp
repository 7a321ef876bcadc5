#pragma once
// Backends for a model cut by layers (docs/parallel.md): one pipeline rank's stage on the CPU
// or a GPU (runtime/parallel/pipeline_backend.hpp joins the ranks), and the GPU/CPU hybrid
// in one process (--cpu-layers K: the first layers on the GPU, the last K on the CPU, the
// residual stream copied to the host in between; runtime/model/layer_pipeline.hpp).

#include <cstdint>
#include <functional>
#include <memory>

#include "actors/device_backend.hpp"
#include "runtime/model/layer_pipeline.hpp"
#include "runtime/parallel/communicator.hpp"
#include "runtime/parallel/pipeline_backend.hpp"

namespace weft::actors {

// What a stage needs besides the model: pool and step sizes, as make_forward_backend takes.
struct StageOptions {
  int num_pages = 0;  // 0 on a GPU: what gpu_memory_fraction leaves
  unsigned cpu_threads = 0;
  int max_tokens_per_step = 512;
  double gpu_memory_fraction = 0.9;
  std::function<void(std::size_t, std::size_t)> on_progress;
};

// The layers `model` holds (a stage model from the loader), on `device`. `model` must
// outlive the stage.
Result<std::unique_ptr<model::StageForward>> make_stage(const model::Model& model,
                                                        model::LayerRange layers,
                                                        const DeviceChoice& device,
                                                        const model::KvLayout& layout,
                                                        const StageOptions& options);

// One rank of a pipeline (stages x tensor_parallel ranks over `world`, which must outlive
// it): its stage of `model` behind a PipelineBackend; on a GPU, `device` is this rank's
// (tensor_parallel_device). A tensor-parallel stage runs on the CPU.
Result<std::unique_ptr<model::ForwardBackend>> make_pipeline_rank_backend(
    const model::Model& model, const DeviceChoice& device, const model::KvLayout& layout,
    const StageOptions& options, parallel::Communicator& world, parallel::PipelinePlace place,
    int micro_batches, int groups = 1);

// Rank 0's backend when it leads a pipeline under the engine: its rank backend, each step
// first broadcast to the other ranks (step_broadcast.hpp). On an error the followers still
// wait for the pool: the caller stops them.
// groups > 1 (sequence groups in flight): up to `groups` steps in the pipeline at once, the
// steps sent to the followers point to point; the followers must be made with the same count
// (make_pipeline_rank_backend, follow_tensor_parallel_leader's point_to_point).
Result<std::unique_ptr<model::ForwardBackend>> make_pipeline_leader(
    const model::Model& model, const DeviceChoice& device, const model::KvLayout& layout,
    const StageOptions& options, parallel::Communicator& world, parallel::PipelinePlace place,
    int micro_batches, int groups = 1);

// The sequence groups a pipeline of `stages` runs with (EngineConfig::pp_groups): 1 without a
// pipeline, pp_groups when set, else one per stage, on CPU and GPU stages alike.
// WEFT_PP_GROUPS_GPU=0 keeps GPU stages to one step at a time (the behaviour before the GPU
// hang was fixed, docs/notes/ppgroups_gpu.md), and check_pipeline_groups then refuses asking
// for more.
int pipeline_groups(int stages, int pp_groups, bool gpu_stages);
bool pipeline_groups_on_gpus_enabled();
Result<void> check_pipeline_groups(int stages, int pp_groups, bool gpu_stages);

// The GPU/CPU split a GPU memory budget allows: the fewest layers on the CPU such that the
// GPU's weights (16-bit: the embedding and the first layers) take at most 3/4 of the budget,
// and the KV pages the rest leaves after 1/10 of it for step buffers. Errors when even one
// layer on the GPU does not fit.
struct GpuCpuSplit {
  int cpu_layers = 0;
  int gpu_pages = 0;  // KV pages of the GPU's layers in the budget
  std::int64_t gpu_weight_bytes = 0;
};
Result<GpuCpuSplit> plan_gpu_cpu_split(const model::Model& model, const model::KvLayout& layout,
                                       std::int64_t gpu_budget_bytes);

// --cpu-layers K on a GPU: layers [0, L - K) in a CudaModel (num_pages pages, or with 0 what
// gpu_memory_fraction leaves), layers [L - K, L) and the lm head on the CPU with the same
// page count in host memory. `model` (the whole model) must outlive the backend.
Result<std::unique_ptr<model::ForwardBackend>> make_gpu_cpu_hybrid(const model::Model& model,
                                                                   const DeviceChoice& device,
                                                                   const model::KvLayout& layout,
                                                                   const StageOptions& options,
                                                                   int cpu_layers);

// The engine's hybrid: cpu_layers when > 0, else the split gpu_budget_bytes allows (its KV
// pages too); with nothing left for the CPU, the plain GPU backend.
Result<std::unique_ptr<model::ForwardBackend>> make_engine_gpu_cpu_hybrid(
    const model::Model& model, const DeviceChoice& device, const model::KvLayout& layout,
    StageOptions options, int cpu_layers, std::int64_t gpu_budget_bytes);

}  // namespace weft::actors
