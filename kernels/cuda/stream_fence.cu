#include "kernels/cuda/stream_fence.hpp"

namespace weft::cuda {
namespace {

__global__ void stream_fence_kernel() {}

}  // namespace

void stream_fence(cudaStream_t stream) {
  stream_fence_kernel<<<1, 1, 0, stream>>>();  // no programmatic launch attribute: see header
}

}  // namespace weft::cuda
