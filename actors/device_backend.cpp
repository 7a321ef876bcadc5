#include "actors/device_backend.hpp"

#include <charconv>
#include <cstdio>
#include <optional>

#include "runtime/parallel/step_broadcast.hpp"

#if WEFT_HAVE_CUDA
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/precision.hpp"
#include "runtime/model/cuda/cuda_model.hpp"
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

Result<std::unique_ptr<model::ForwardBackend>> make_tensor_parallel_leader(
    const model::Model& model, const DeviceChoice& device, const model::KvLayout& layout,
    int num_pages, unsigned cpu_threads, parallel::Communicator& group) {
  if (device.cuda) {
    return Error(ErrorCode::kUnsupported,
                 "tensor parallelism runs on the CPU backend so far (device cpu); the CUDA model "
                 "has no all-reduce yet (docs/parallel.md)");
  }
  if (num_pages < 1) {
    return Error(ErrorCode::kInvalidArgument, "tensor parallel: the KV pool has no pages");
  }
  std::unique_ptr<model::ForwardBackend> local =
      std::make_unique<model::CpuForwardBackend>(model, layout, num_pages, cpu_threads, &group);
  auto leader = parallel::TensorParallelLeader::create(std::move(local), group);
  if (!leader) return leader.error();
  return std::unique_ptr<model::ForwardBackend>(std::move(leader.value()));
}

}  // namespace weft::actors
