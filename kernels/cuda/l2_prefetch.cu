#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/l2_prefetch.hpp"

namespace weft::cuda {
namespace {

constexpr std::size_t kChunk = 16u << 10;
constexpr int kBlocks = 264, kThreads = 32;  // two blocks per H100 multiprocessor

__global__ void __launch_bounds__(kThreads)
    l2_prefetch_kernel(const char* data, std::size_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x * kChunk;
  for (std::size_t at = (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kChunk;
       at < bytes; at += stride) {
    const auto size = static_cast<unsigned>(bytes - at < kChunk ? bytes - at : kChunk);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(data + at), "r"(size)
                 : "memory");
  }
#else
  (void)data;
  (void)bytes;
#endif
}

}  // namespace

void l2_prefetch(const void* data, std::size_t bytes, cudaStream_t stream) {
  bytes &= ~static_cast<std::size_t>(15);
  if (data == nullptr || bytes == 0) return;
  const auto chunks = static_cast<int>((bytes + kChunk - 1) / kChunk);
  const int blocks = std::min(kBlocks, (chunks + kThreads - 1) / kThreads);
  l2_prefetch_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const char*>(data), bytes);
}

}  // namespace weft::cuda
