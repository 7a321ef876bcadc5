#include "kernels/cuda/chain_feed.hpp"

namespace weft::cuda {
namespace {

__global__ void chain_feed_kernel(const unsigned char* src, std::size_t pitch, std::int32_t* dst,
                                  int n, int vocab) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  const std::int32_t id = *reinterpret_cast<const std::int32_t*>(src + i * pitch);
  dst[i] = id >= 0 && id < vocab ? id : 0;
}

}  // namespace

void chain_feed(const void* src, std::size_t pitch, std::int32_t* dst, int n, int vocab,
                cudaStream_t stream) {
  if (n <= 0) return;
  constexpr int kThreads = 128;
  chain_feed_kernel<<<(n + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
      static_cast<const unsigned char*>(src), pitch, dst, n, vocab);
}

}  // namespace weft::cuda
