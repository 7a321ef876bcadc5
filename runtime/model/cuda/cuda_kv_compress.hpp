#pragma once
// KV-Compress in the CUDA forward pass (kernels/cuda/kv_compress.hpp has the kernels,
// runtime/model/kv_compress_forward.hpp the CPU's hook, whose order this follows): a slice with
// compress_evict > 0 has each layer's cache scored by its window queries, its survivors chosen
// per kv head and compacted, right after that layer's attention, on the step's stream (no wait
// on the host). The scheduler returns the freed pages to the pool when the step completes.

#include <cuda_runtime_api.h>

#include <vector>

#include "kernels/cuda/kv_compress.hpp"
#include "runtime/model/cuda/device_buffer.hpp"
#include "runtime/model/step_batch.hpp"
#include "weft/error.hpp"

namespace weft::model {

class CudaKvCompress {
 public:
  // The step's compressing slices become jobs, uploaded on `stream` (the buffers grow as
  // needed). Returns whether the step compresses anything.
  Result<bool> prepare(const StepBatch& batch, int num_heads, int num_kv_heads,
                       cudaStream_t stream);
  bool active() const noexcept { return args_.num_jobs > 0; }

  // One layer, after its attention: q holds the step's rotated queries (token t's head h at
  // q + t * q_stride + h * head_dim), kv.layer_offset selects the layer.
  void compress_layer(const float* q, std::size_t q_stride, float scale,
                      const cuda::FlatBatchView& batch, const cuda::PagedKvView& kv,
                      cudaStream_t stream);

 private:
  std::vector<cuda::KvCompressJob> host_jobs_;
  cuda_detail::DeviceBuffer jobs_, row_stats_, scores_, kept_;
  cuda::KvCompressArgs args_;
};

}  // namespace weft::model
