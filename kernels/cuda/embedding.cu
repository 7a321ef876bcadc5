#include "kernels/cuda/common.cuh"
#include "kernels/cuda/embedding.hpp"

namespace weft::cuda {
namespace {

template <class T>
__global__ void embedding_kernel(const T* table, const std::int32_t* tokens, int hidden,
                                 float* out) {
  detail::grid_dependency_wait();
  const std::size_t t = blockIdx.x;
  const T* row = table + static_cast<std::size_t>(tokens[t]) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x)
    out[t * hidden + i] = detail::to_float(row[i]);
}

}  // namespace

void embedding_gather(const void* table, Precision precision, const std::int32_t* tokens,
                      int num_tokens, int hidden, float* out, cudaStream_t stream) {
  if (num_tokens == 0) return;
  WEFT_DISPATCH_PRECISION(precision, {
    detail::launch(embedding_kernel<T>, num_tokens, 256, 0, stream, static_cast<const T*>(table),
                   tokens, hidden, out);
  });
}

}  // namespace weft::cuda
