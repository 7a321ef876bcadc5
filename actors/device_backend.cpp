#include "actors/device_backend.hpp"

#include <charconv>

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

std::size_t kv_page_bytes(const DeviceChoice& device, const model::KvLayout& layout) {
  return layout.floats_per_page() * (device.cuda ? 2 : sizeof(float));
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
