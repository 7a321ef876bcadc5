#include "kernels/cuda/common.cuh"
#include "kernels/cuda/learned_positions.hpp"

namespace weft::cuda {
namespace {

template <class T>
__global__ void scale_add_positions_kernel(float* x, int hidden, float scale, const T* table,
                                           const std::int32_t* positions, int offset) {
  detail::grid_dependency_wait();
  const std::size_t t = blockIdx.x;
  float* row = x + t * hidden;
  const T* pos_row =
      table != nullptr ? table + static_cast<std::size_t>(positions[t] + offset) * hidden : nullptr;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    float v = row[i] * scale;
    if (pos_row != nullptr) v += detail::to_float(pos_row[i]);
    row[i] = v;
  }
}

}  // namespace

void scale_add_positions(float* x, int num_tokens, int hidden, float scale, const void* table,
                         Precision precision, const std::int32_t* positions, int offset,
                         cudaStream_t stream) {
  if (num_tokens == 0) return;
  WEFT_DISPATCH_PRECISION(precision, {
    detail::launch(scale_add_positions_kernel<T>, num_tokens, 256, 0, stream, x, hidden, scale,
                   static_cast<const T*>(table), positions, offset);
  });
}

}  // namespace weft::cuda
