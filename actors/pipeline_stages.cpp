#include "actors/pipeline_stages.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/parallel/step_broadcast.hpp"
#include "weft/log.hpp"

#if WEFT_HAVE_CUDA
#include "kernels/cuda/precision.hpp"
#include "runtime/model/cuda/cuda_model.hpp"
#endif
#if WEFT_HAVE_NCCL
#include "runtime/parallel/nccl_communicator.hpp"
#include "runtime/parallel/nccl_pipeline.hpp"
#endif

namespace weft::actors {
namespace {

#if WEFT_HAVE_CUDA
// A CudaModel holding a layer range (of its rank's shard, in a hybrid), as a pipeline stage.
// In a hybrid the stage's tensor-parallel group arrives with the first step (the pipeline
// splits it from the world then, over MPI): the stage joins it over NCCL on its GPU, with the
// group's host communicator carrying NCCL's unique id, and from then on the model all-reduces
// inside its layers as a tensor-parallel shard does. Each NCCL group spans the stage's ranks,
// which sit on distinct GPUs (local rank modulo the GPUs: 4 ranks on 2 GPUs give each stage
// GPUs 0 and 1).
class CudaStage final : public model::StageForward {
 public:
  explicit CudaStage(model::CudaModel gpu) : gpu_(std::move(gpu)) {}
  const model::ModelSpec& spec() const noexcept override { return gpu_.spec(); }
  model::LayerRange layers() const noexcept override { return gpu_.layers(); }
  int num_pages() const noexcept override { return gpu_.num_pages(); }
  int page_size() const noexcept override { return gpu_.kv_layout().page_size; }
  Result<void> forward(const model::StepBatch& batch, std::span<const float> hidden_in,
                       std::vector<float>& out, parallel::Communicator* tensor_parallel) override {
    if (tensor_parallel != joined_) {
      if (auto ok = join(tensor_parallel); !ok) return ok;
    }
    return gpu_.forward_layers(batch, hidden_in, out);
  }
  int cuda_device() const noexcept override { return gpu_.device(); }
  void* cuda_stream() const noexcept override { return gpu_.cuda_stream(); }
  Result<void> enqueue(const model::StepBatch& batch, const float* hidden_in, float* out,
                       parallel::Communicator* tensor_parallel) override {
    if (tensor_parallel != joined_) {
      if (auto ok = join(tensor_parallel); !ok) return ok;
    }
    return gpu_.enqueue_layers(batch, hidden_in, out);
  }
  bool samples_on_device() const noexcept override { return true; }
  Result<void> adopt_logits(const float* logits, int rows) override {
    return gpu_.adopt_logits(logits, rows);
  }
  Result<void> sample(const model::DeviceSamplingInput& input,
                      model::DeviceSamplingOutput& output) override {
    return gpu_.sample(input, output);
  }

 private:
  Result<void> join(parallel::Communicator* group) {
    if (joined_ != nullptr || group == nullptr) {
      return Error(ErrorCode::kInvalidArgument,
                   "a GPU pipeline stage joins one tensor-parallel group, at its first step");
    }
#if WEFT_HAVE_NCCL
    auto nccl = parallel::make_nccl_communicator(*group, gpu_.device(), gpu_.cuda_stream());
    if (!nccl) return nccl.error();
    nccl_ = std::move(nccl.value());
    if (auto ok = gpu_.set_tensor_parallel(*nccl_); !ok) return ok;
    joined_ = group;
    return {};
#else
    return Error(ErrorCode::kUnsupported,
                 "a GPU pipeline stage of " + std::to_string(group->size()) +
                     " tensor-parallel ranks needs NCCL, which this Weft was built without "
                     "(CMake finds it next to CUDA, with MPI)");
#endif
  }

  // The communicator outlives the model (declared first): the model's destructor waits for
  // its stream and drops the graphs holding NCCL's kernels; the collective memory is NCCL's.
  std::unique_ptr<parallel::Communicator> nccl_;
  parallel::Communicator* joined_ = nullptr;  // the host group nccl_ was made over
  model::CudaModel gpu_;
};

Result<model::CudaModel> make_cuda_layers(const model::Model& model, model::LayerRange layers,
                                          const DeviceChoice& device, const model::KvLayout& layout,
                                          const StageOptions& options) {
  model::CudaModelOptions o;
  o.device = device.index;
  o.precision = cuda::Precision::kBF16;
  o.kv_dtype = layout.dtype;
  o.page_size = layout.page_size;
  o.num_pages = options.num_pages;
  o.max_tokens_per_step = options.max_tokens_per_step;
  o.gpu_memory_fraction = options.gpu_memory_fraction;
  o.on_upload_progress = options.on_progress;
  o.layers = layers;
  return model::CudaModel::create(model, o);
}
#endif

[[maybe_unused]] Error without_cuda(const DeviceChoice& device) {
  return Error(ErrorCode::kUnsupported,
               "device cuda:" + std::to_string(device.index) +
                   ": this Weft was built without CUDA (configure with WEFT_CUDA=ON)");
}

}  // namespace

Result<std::unique_ptr<model::StageForward>> make_stage(const model::Model& model,
                                                        model::LayerRange layers,
                                                        const DeviceChoice& device,
                                                        const model::KvLayout& layout,
                                                        const StageOptions& options) {
  if (!device.cuda) {
    if (options.num_pages < 1) {
      return Error(ErrorCode::kInvalidArgument, "a CPU pipeline stage needs KV pages");
    }
    return std::unique_ptr<model::StageForward>(std::make_unique<model::CpuStage>(
        model, layers, layout, options.num_pages, options.cpu_threads));
  }
#if WEFT_HAVE_CUDA
  auto gpu = make_cuda_layers(model, layers, device, layout, options);
  if (!gpu) return gpu.error();
  return std::unique_ptr<model::StageForward>(std::make_unique<CudaStage>(std::move(*gpu)));
#else
  return without_cuda(device);
#endif
}

Result<std::unique_ptr<model::ForwardBackend>> make_pipeline_rank_backend(
    const model::Model& model, const DeviceChoice& device, const model::KvLayout& layout,
    const StageOptions& options, parallel::Communicator& world, parallel::PipelinePlace place,
    int micro_batches, int groups) {
#if !WEFT_HAVE_NCCL
  if (device.cuda && place.tensor_parallel > 1) {
    return Error(ErrorCode::kUnsupported,
                 "--tensor-parallel with --pipeline-parallel on GPUs needs NCCL, which this Weft "
                 "was built without (pass --device cpu, or build with CUDA, MPI and NCCL)");
  }
#endif
  auto stage =
      make_stage(model, {model.first_layer(), model.layer_count()}, device, layout, options);
  if (!stage) return stage.error();
  parallel::DeviceLinksFactory device_links;
#if WEFT_HAVE_NCCL
  // GPU stages hand the residual stream on device to device where every rank has a GPU of its
  // own (else through host memory, as CPU stages do): nccl_pipeline.hpp.
  if (device.cuda) device_links = parallel::make_nccl_stage_links;
#endif
  auto backend = parallel::PipelineBackend::create(std::move(*stage), world, place, micro_batches,
                                                   std::move(device_links), groups);
  if (!backend) return backend.error();
  return std::unique_ptr<model::ForwardBackend>(std::move(*backend));
}

Result<std::unique_ptr<model::ForwardBackend>> make_pipeline_leader(
    const model::Model& model, const DeviceChoice& device, const model::KvLayout& layout,
    const StageOptions& options, parallel::Communicator& world, parallel::PipelinePlace place,
    int micro_batches, int groups) {
  auto local = make_pipeline_rank_backend(model, device, layout, options, world, place,
                                          micro_batches, groups);
  if (!local) return local.error();
  auto leader = parallel::TensorParallelLeader::create(std::move(*local), world, groups > 1);
  if (!leader) return leader.error();
  return std::unique_ptr<model::ForwardBackend>(std::move(*leader));
}

bool pipeline_groups_on_gpus_enabled() {
  const char* v = std::getenv("WEFT_PP_GROUPS_GPU");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

int pipeline_groups(int stages, int pp_groups, bool gpu_stages) {
  if (stages <= 1) return 1;
  if (gpu_stages && !pipeline_groups_on_gpus_enabled()) return 1;
  return pp_groups > 0 ? pp_groups : stages;
}

Result<void> check_pipeline_groups(int stages, int pp_groups, bool gpu_stages) {
  if (stages > 1 && gpu_stages && pp_groups > 1 && !pipeline_groups_on_gpus_enabled()) {
    return Error(ErrorCode::kUnsupported,
                 "pp_groups " + std::to_string(pp_groups) +
                     ": sequence groups in flight over GPU stages are turned off by "
                     "WEFT_PP_GROUPS_GPU=0 (unset it on every rank, or ask for --pp-groups 1; "
                     "docs/parallel.md)");
  }
  return {};
}

namespace {

// Bytes a layer's weights take on the GPU: every matrix in 16 bits (plus its blocks when
// quantized), norms and biases in fp32.
std::int64_t gpu_layer_bytes(const model::Model::Layer& L) {
  std::int64_t bytes = 0;
  for (const cpu::WeightMatrix* w :
       {&L.q, &L.k, &L.v, &L.qkv, &L.o, &L.gate_up, &L.gate, &L.up, &L.down}) {
    if (w->data == nullptr) continue;
    bytes += static_cast<std::int64_t>(w->rows * w->cols * 2);
    if (w->quantized()) bytes += static_cast<std::int64_t>(w->rows * w->row_bytes());
  }
  for (const auto* v : {&L.attn_norm, &L.attn_norm_bias, &L.mlp_norm, &L.mlp_norm_bias, &L.q_bias,
                        &L.k_bias, &L.v_bias, &L.qkv_bias, &L.o_bias, &L.gate_bias, &L.up_bias,
                        &L.gate_up_bias, &L.down_bias}) {
    bytes += static_cast<std::int64_t>(v->size() * 4);
  }
  return bytes;
}

}  // namespace

Result<GpuCpuSplit> plan_gpu_cpu_split(const model::Model& model, const model::KvLayout& layout,
                                       std::int64_t gpu_budget_bytes) {
  const auto& spec = model.spec();
  const int L = spec.num_layers;
  if (model.first_layer() != 0 || model.layer_count() != L) {
    return Error(ErrorCode::kInvalidArgument, "the GPU/CPU split needs the whole model");
  }
  const std::int64_t embedding = static_cast<std::int64_t>(spec.vocab_size) * spec.hidden_size * 2;
  const std::int64_t weight_cap = gpu_budget_bytes / 4 * 3;
  const std::int64_t buffers = gpu_budget_bytes / 10;
  GpuCpuSplit split;
  std::int64_t weights = embedding;
  int gpu_layers = 0;
  for (; gpu_layers < L; ++gpu_layers) {
    const std::int64_t next = gpu_layer_bytes(model.layers()[static_cast<std::size_t>(gpu_layers)]);
    if (weights + next > weight_cap) break;
    weights += next;
  }
  if (gpu_layers == L) {
    // Everything fits: the lm head (when untied) and the final norm go to the GPU too.
    split.cpu_layers = 0;
  } else if (gpu_layers == 0) {
    return Error(ErrorCode::kResourceExhausted,
                 "a GPU memory budget of " + std::to_string(gpu_budget_bytes >> 20) +
                     " MiB holds no layer: the embedding takes " + std::to_string(embedding >> 20) +
                     " MiB and a layer " +
                     std::to_string(gpu_layer_bytes(model.layers()[0]) >> 20) +
                     " MiB, within 3/4 of the budget");
  } else {
    split.cpu_layers = L - gpu_layers;
  }
  split.gpu_weight_bytes = weights;
  model::KvLayout gpu_layout = layout;
  gpu_layout.num_layers = gpu_layers;
  const std::int64_t left = gpu_budget_bytes - weights - buffers;
  split.gpu_pages = static_cast<int>(
      std::max<std::int64_t>(1, left / static_cast<std::int64_t>(gpu_layout.bytes_per_page())));
  return split;
}

Result<std::unique_ptr<model::ForwardBackend>> make_gpu_cpu_hybrid(const model::Model& model,
                                                                   const DeviceChoice& device,
                                                                   const model::KvLayout& layout,
                                                                   const StageOptions& options,
                                                                   int cpu_layers) {
  const int L = model.spec().num_layers;
  if (!device.cuda) {
    return Error(ErrorCode::kInvalidArgument,
                 "--cpu-layers keeps some layers on the CPU beside a GPU; on --device cpu every "
                 "layer is on the CPU already");
  }
  if (cpu_layers < 1 || cpu_layers >= L) {
    return Error(ErrorCode::kInvalidArgument, "--cpu-layers " + std::to_string(cpu_layers) +
                                                  " is not in [1, " + std::to_string(L - 1) +
                                                  "]: the model has " + std::to_string(L) +
                                                  " layers and the GPU keeps at least one");
  }
  if (model.first_layer() != 0 || model.layer_count() != L) {
    return Error(ErrorCode::kInvalidArgument, "--cpu-layers needs the whole model in one process");
  }
#if WEFT_HAVE_CUDA
  auto gpu = make_cuda_layers(model, {0, L - cpu_layers}, device, layout, options);
  if (!gpu) return gpu.error();
  const int pages = gpu->num_pages();
  std::vector<std::unique_ptr<model::StageForward>> stages;
  stages.push_back(std::make_unique<CudaStage>(std::move(*gpu)));
  try {
    stages.push_back(std::make_unique<model::CpuStage>(
        model, model::LayerRange{L - cpu_layers, cpu_layers}, layout, pages, options.cpu_threads));
  } catch (const std::bad_alloc&) {
    model::KvLayout host = layout;
    host.num_layers = cpu_layers;
    return Error(
        ErrorCode::kResourceExhausted,
        "--cpu-layers " + std::to_string(cpu_layers) + ": host memory for " +
            std::to_string(pages) + " KV pages of " + std::to_string(cpu_layers) + " layers (" +
            std::to_string((static_cast<std::int64_t>(host.bytes_per_page()) * pages) >> 20) +
            " MiB) could not be allocated; give the GPU fewer pages (--kv-budget-mb "
            "or --gpu-memory-fraction)");
  }
  auto pipeline = model::LayerPipeline::create(std::move(stages));
  if (!pipeline) return pipeline.error();
  return std::unique_ptr<model::ForwardBackend>(std::move(*pipeline));
#else
  (void)layout;
  (void)options;
  return without_cuda(device);
#endif
}

Result<std::unique_ptr<model::ForwardBackend>> make_engine_gpu_cpu_hybrid(
    const model::Model& model, const DeviceChoice& device, const model::KvLayout& layout,
    StageOptions options, int cpu_layers, std::int64_t gpu_budget_bytes) {
  if (cpu_layers <= 0) {
    auto split = plan_gpu_cpu_split(model, layout, gpu_budget_bytes);
    if (!split) {
      return Error(split.error().code(),
                   "gpu_memory_budget_mb: " + std::string(split.error().what()));
    }
    cpu_layers = split->cpu_layers;
    options.num_pages = split->gpu_pages;
  }
  if (cpu_layers == 0) {
    return make_forward_backend(model, device, layout, options.num_pages, options.cpu_threads,
                                options.max_tokens_per_step, options.gpu_memory_fraction,
                                options.on_progress);
  }
  log_info("engine: GPU/CPU hybrid: layers [0, " +
           std::to_string(model.spec().num_layers - cpu_layers) + ") on " + device_name(device) +
           ", the last " + std::to_string(cpu_layers) + " cpu layers and the lm head on the CPU");
  return make_gpu_cpu_hybrid(model, device, layout, options, cpu_layers);
}

}  // namespace weft::actors
