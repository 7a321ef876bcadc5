#include "runtime/model/cuda/cuda_seq2seq_backend.hpp"

#include <algorithm>

namespace weft::model {

Result<std::unique_ptr<CudaSeq2SeqBackend>> CudaSeq2SeqBackend::create(
    const Seq2SeqModel& model, const KvLayout& layout, const CudaSeq2SeqBackendOptions& options) {
  if (layout.dtype != KvDtype::kBF16) {
    return Error(ErrorCode::kUnsupported,
                 std::string("kv_cache_dtype ") + kv_dtype_name(layout.dtype) +
                     ": encoder-decoder models on a GPU keep K and V in bf16 (use auto or bf16)");
  }
  const KvLayout want = model.kv_layout(layout.page_size);
  if (layout.num_layers != want.num_layers || layout.num_kv_heads != want.num_kv_heads ||
      layout.head_dim != want.head_dim) {
    return Error(ErrorCode::kInvalidArgument,
                 "CUDA encoder-decoder backend: the KV layout does not match the model's "
                 "decoder (layers, heads, head_dim)");
  }
  CudaSeq2SeqOptions gpu_options;
  gpu_options.device = options.device;
  gpu_options.precision = cuda::Precision::kBF16;
  auto gpu = CudaSeq2Seq::create(model, gpu_options);
  if (!gpu) return gpu.error();
  // Step buffers before the pool, so a pool sized from the device leaves room for them.
  if (auto ok = gpu.value()->reserve_step_buffers(std::max(1, options.max_tokens_per_step)); !ok) {
    return ok.error();
  }
  if (auto pages = gpu.value()->make_page_pool(layout.page_size, options.num_pages,
                                               options.gpu_memory_fraction);
      !pages) {
    return pages.error();
  }
  return std::unique_ptr<CudaSeq2SeqBackend>(
      new CudaSeq2SeqBackend(model.spec(), std::move(gpu.value())));
}

}  // namespace weft::model
