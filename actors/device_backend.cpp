#include "actors/device_backend.hpp"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "runtime/parallel/step_broadcast.hpp"

#if WEFT_HAVE_CUDA
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/precision.hpp"
#include "runtime/model/cuda/cuda_encoder.hpp"
#include "runtime/model/cuda/cuda_model.hpp"
#endif
#if WEFT_HAVE_NCCL
#include "runtime/parallel/nccl_communicator.hpp"
#endif

namespace weft::actors {

Result<DeviceChoice> parse_device(std::string_view text) {
  if (text == "cpu") return DeviceChoice{};
  if (text == "auto") {
#if WEFT_HAVE_CUDA
    if (!cuda::visible_devices().devices.empty()) return DeviceChoice{true, 0};
#endif
    return DeviceChoice{};
  }
  if (text == "cuda") return DeviceChoice{true, 0};
  if (text.substr(0, 5) == "cuda:" && text.size() > 5) {
    int index = -1;
    const auto* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data() + 5, end, index);
    if (ec == std::errc() && ptr == end && index >= 0) return DeviceChoice{true, index};
  }
  return Error(
      ErrorCode::kInvalidArgument,
      "device \"" + std::string(text) + "\" is not one of auto, cpu, cuda, cuda:N (N >= 0)");
}

std::string device_name(const DeviceChoice& device) {
  return device.cuda ? "cuda:" + std::to_string(device.index) : "cpu";
}

Result<KvDtype> resolve_kv_cache_dtype(std::string_view text, const DeviceChoice& device) {
  std::optional<KvDtype> d;
  if (text == "auto") {
    d = device.cuda ? KvDtype::kBF16 : KvDtype::kF32;
  } else if (text == "f32" || text == "fp32" || text == "float32") {
    d = KvDtype::kF32;
  } else if (text == "bf16" || text == "bfloat16") {
    d = KvDtype::kBF16;
  } else if (text == "fp16" || text == "f16" || text == "float16") {
    d = KvDtype::kF16;
  } else if (text == "int8") {
    d = KvDtype::kInt8;
  } else if (text == "fp8" || text == "fp8_e4m3" || text == "e4m3") {
    d = KvDtype::kFp8E4M3;
  }
  if (!d) {
    return Error(ErrorCode::kInvalidArgument,
                 "kv cache dtype \"" + std::string(text) +
                     "\" is not one of auto, f32, bf16, fp16, int8, fp8 (fp8 is e4m3)");
  }
  if (device.cuda && (*d == KvDtype::kF32 || *d == KvDtype::kF16)) {
    return Error(ErrorCode::kUnsupported,
                 "kv cache dtype " + std::string(kv_dtype_name(*d)) + " on " + device_name(device) +
                     ": the GPU keeps KV pages in bf16 (the precision it runs in), int8 or fp8");
  }
  return *d;
}

std::size_t kv_page_bytes(const DeviceChoice& device, const model::KvLayout& layout) {
  (void)device;  // the layout's dtype is what the device stores
  return layout.bytes_per_page();
}

std::string describe_kv_pool(const model::KvLayout& layout, std::int64_t num_pages) {
  const auto bytes = static_cast<double>(layout.bytes_per_page()) * static_cast<double>(num_pages);
  char mib[32];
  std::snprintf(mib, sizeof mib, "%.1f", bytes / (1 << 20));
  return std::to_string(num_pages) + " pages of " + std::to_string(layout.page_size) + " tokens (" +
         std::to_string(num_pages * layout.page_size) + " tokens, " + kv_dtype_name(layout.dtype) +
         (kv_dtype_scaled(layout.dtype) ? " KV with a scale per token and kv head, " : " KV, ") +
         std::to_string(layout.bytes_per_page()) + " bytes a page, " + mib + " MiB)";
}

Result<std::unique_ptr<model::ForwardBackend>> make_forward_backend(
    const model::Model& model, const DeviceChoice& device, const model::KvLayout& layout,
    int num_pages, unsigned cpu_threads, int max_tokens_per_step, double gpu_memory_fraction,
    std::function<void(std::size_t, std::size_t)> on_progress) {
  if (!device.cuda) {
    return std::unique_ptr<model::ForwardBackend>(
        std::make_unique<model::CpuForwardBackend>(model, layout, num_pages, cpu_threads));
  }
#if WEFT_HAVE_CUDA
  model::CudaModelOptions options;
  options.device = device.index;
  options.precision = cuda::Precision::kBF16;
  options.kv_dtype = layout.dtype;
  options.page_size = layout.page_size;
  options.num_pages = num_pages;
  options.max_tokens_per_step = max_tokens_per_step;
  options.gpu_memory_fraction = gpu_memory_fraction;
  options.on_upload_progress = std::move(on_progress);
  auto gpu = model::CudaModel::create(model, options);
  if (!gpu) return gpu.error();
  return std::unique_ptr<model::ForwardBackend>(
      std::make_unique<model::CudaModel>(std::move(gpu.value())));
#else
  (void)max_tokens_per_step;
  (void)gpu_memory_fraction;
  (void)on_progress;
  return Error(ErrorCode::kUnsupported,
               "device cuda:" + std::to_string(device.index) +
                   ": this Weft was built without CUDA (configure with WEFT_CUDA=ON)");
#endif
}

Result<std::unique_ptr<model::EncoderBackend>> make_encoder_backend(
    const model::EncoderModel& model, const DeviceChoice& device, unsigned cpu_threads,
    int max_tokens_per_step) {
  if (!device.cuda) {
    return std::unique_ptr<model::EncoderBackend>(
        std::make_unique<model::CpuEncoderBackend>(model, cpu_threads));
  }
#if WEFT_HAVE_CUDA
  model::CudaEncoderOptions options;
  options.device = device.index;
  options.precision = cuda::Precision::kBF16;
  options.max_tokens_per_step = max_tokens_per_step;
  auto gpu = model::CudaEncoder::create(model, options);
  if (!gpu) return gpu.error();
  return std::unique_ptr<model::EncoderBackend>(std::move(gpu.value()));
#else
  (void)max_tokens_per_step;
  return Error(ErrorCode::kUnsupported,
               "device cuda:" + std::to_string(device.index) +
                   ": this Weft was built without CUDA (configure with WEFT_CUDA=ON)");
#endif
}

namespace {

#if WEFT_HAVE_NCCL
// A rank's shard on its GPU: the CudaModel and the NCCL communicator on its stream. The
// model goes first (its destructor waits for the stream and drops the graphs that hold
// NCCL's kernels), then the communicator.
class CudaShard final : public model::ForwardBackend {
 public:
  CudaShard(model::CudaModel gpu, parallel::Communicator& group)
      : group_(group), gpu_(std::move(gpu)) {}

  // Joins the group: the NCCL unique id over `group`, then the model's biases and warm-up
  // all-reduces (CudaModel::set_tensor_parallel). Collective.
  Result<void> connect() {
    auto nccl = parallel::make_nccl_communicator(group_, gpu_.device(), gpu_.cuda_stream());
    if (!nccl) return nccl.error();
    nccl_ = std::move(nccl.value());
    return gpu_.set_tensor_parallel(*nccl_);
  }

  const model::ModelSpec& spec() const noexcept override { return gpu_.spec(); }
  int num_pages() const noexcept override { return gpu_.num_pages(); }
  Result<void> forward(const model::StepBatch& batch, std::vector<float>& logits) override {
    return gpu_.forward(batch, logits);
  }
  bool samples_on_device() const noexcept override { return gpu_.samples_on_device(); }
  Result<void> launch(const model::StepBatch& batch) override { return gpu_.launch(batch); }
  Result<void> sample(const model::DeviceSamplingInput& input,
                      model::DeviceSamplingOutput& output) override {
    return gpu_.sample(input, output);
  }

 private:
  parallel::Communicator& group_;
  std::unique_ptr<parallel::Communicator> nccl_;
  model::CudaModel gpu_;
};

Result<std::unique_ptr<CudaShard>> make_cuda_shard(
    const model::Model& model, const DeviceChoice& device, const model::KvLayout& layout,
    int num_pages, int max_tokens_per_step, double gpu_memory_fraction,
    parallel::Communicator& group, std::function<void(std::size_t, std::size_t)> on_progress) {
  model::CudaModelOptions options;
  options.device = device.index;
  options.precision = cuda::Precision::kBF16;
  options.kv_dtype = layout.dtype;
  options.page_size = layout.page_size;
  options.num_pages = num_pages;
  options.max_tokens_per_step = max_tokens_per_step;
  options.gpu_memory_fraction = gpu_memory_fraction;
  options.on_upload_progress = std::move(on_progress);
  auto gpu = model::CudaModel::create(model, options);
  if (!gpu) return gpu.error();
  return std::make_unique<CudaShard>(std::move(gpu.value()), group);
}
#endif

#if !WEFT_HAVE_NCCL
Error no_gpu_tensor_parallel(const DeviceChoice& device) {
#if WEFT_HAVE_CUDA
  return Error(ErrorCode::kUnsupported,
               "tensor parallelism on " + device_name(device) +
                   " needs NCCL, which this Weft was built without (CMake finds it next to "
                   "CUDA when MPI is found too; docs/parallel.md)");
#else
  return Error(ErrorCode::kUnsupported,
               "device " + device_name(device) +
                   ": this Weft was built without CUDA (configure with WEFT_CUDA=ON)");
#endif
}
#endif

}  // namespace

Result<DeviceChoice> tensor_parallel_device(const DeviceChoice& device, int world_rank) {
  if (!device.cuda) return device;
  if (device.index != 0) {
    return Error(ErrorCode::kInvalidArgument,
                 "--device " + device_name(device) +
                     " with --tensor-parallel: give --device cuda; each rank takes the GPU of "
                     "its local rank (CUDA_VISIBLE_DEVICES picks which GPUs)");
  }
  int local = world_rank;
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') {
      local = std::atoi(v);
      break;
    }
  }
  int count = 0;
#if WEFT_HAVE_CUDA
  count = static_cast<int>(cuda::visible_devices().devices.size());
#endif
  if (count < 1) {
    return Error(ErrorCode::kNotFound, "--tensor-parallel on " + device_name(device) + ": rank " +
                                           std::to_string(world_rank) + " sees no GPU");
  }
  return DeviceChoice{true, std::max(local, 0) % count};
}

Result<std::unique_ptr<model::ForwardBackend>> make_tensor_parallel_shard(
    const model::Model& model, const DeviceChoice& device, const model::KvLayout& layout,
    int num_pages, unsigned cpu_threads, int max_tokens_per_step, double gpu_memory_fraction,
    parallel::Communicator& group, std::function<void(std::size_t, std::size_t)> on_progress) {
  if (!device.cuda) {
    if (num_pages < 1) {
      return Error(ErrorCode::kInvalidArgument, "tensor parallel: the KV pool has no pages");
    }
    return std::unique_ptr<model::ForwardBackend>(
        std::make_unique<model::CpuForwardBackend>(model, layout, num_pages, cpu_threads, &group));
  }
#if WEFT_HAVE_NCCL
  auto shard = make_cuda_shard(model, device, layout, num_pages, max_tokens_per_step,
                               gpu_memory_fraction, group, std::move(on_progress));
  if (!shard) return shard.error();
  if (auto ok = (*shard)->connect(); !ok) return ok.error();
  return std::unique_ptr<model::ForwardBackend>(std::move(shard.value()));
#else
  (void)max_tokens_per_step;
  (void)gpu_memory_fraction;
  (void)on_progress;
  return no_gpu_tensor_parallel(device);
#endif
}

Result<std::unique_ptr<model::ForwardBackend>> make_tensor_parallel_leader(
    const model::Model& model, const DeviceChoice& device, const model::KvLayout& layout,
    int num_pages, unsigned cpu_threads, parallel::Communicator& group, int max_tokens_per_step,
    double gpu_memory_fraction, std::function<void(std::size_t, std::size_t)> on_progress) {
  if (!device.cuda) {
    auto local = make_tensor_parallel_shard(model, device, layout, num_pages, cpu_threads,
                                            max_tokens_per_step, gpu_memory_fraction, group);
    if (!local) return local.error();
    auto leader = parallel::TensorParallelLeader::create(std::move(local.value()), group);
    if (!leader) return leader.error();
    return std::unique_ptr<model::ForwardBackend>(std::move(leader.value()));
  }
#if WEFT_HAVE_NCCL
  // The pool first (its page count is what the followers wait for), then NCCL: a follower
  // makes its communicator after its model, which it makes once it knows the page count.
  auto shard = make_cuda_shard(model, device, layout, num_pages, max_tokens_per_step,
                               gpu_memory_fraction, group, std::move(on_progress));
  if (!shard) return shard.error();
  CudaShard* gpu = shard->get();
  auto leader = parallel::TensorParallelLeader::create(std::move(shard.value()), group);
  if (!leader) return leader.error();
  if (auto ok = gpu->connect(); !ok) return ok.error();
  return std::unique_ptr<model::ForwardBackend>(std::move(leader.value()));
#else
  (void)max_tokens_per_step;
  (void)gpu_memory_fraction;
  (void)on_progress;
  (void)cpu_threads;
  return no_gpu_tensor_parallel(device);
#endif
}

}  // namespace weft::actors
