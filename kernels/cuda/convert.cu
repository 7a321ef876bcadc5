#include "kernels/cuda/common.cuh"
#include "kernels/cuda/convert.hpp"

namespace weft::cuda {
namespace {

template <class S, class T>
__global__ void convert_kernel(const S* src, T* dst, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    dst[i] = detail::from_float<T>(detail::to_float(src[i]));
  }
}

unsigned blocks_for(std::size_t n) {
  const std::size_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 65535 ? (b == 0 ? 1 : b) : 65535);
}

}  // namespace

void convert_to_precision(const void* src, SourceType src_type, void* dst, Precision precision,
                          std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  WEFT_DISPATCH_PRECISION(precision, {
    T* out = static_cast<T*>(dst);
    switch (src_type) {
      case SourceType::kF32:
        convert_kernel<<<blocks_for(n), 256, 0, stream>>>(static_cast<const float*>(src), out, n);
        break;
      case SourceType::kF16:
        convert_kernel<<<blocks_for(n), 256, 0, stream>>>(static_cast<const __half*>(src), out, n);
        break;
      case SourceType::kBF16:
        convert_kernel<<<blocks_for(n), 256, 0, stream>>>(static_cast<const __nv_bfloat16*>(src),
                                                          out, n);
        break;
    }
  });
}

void convert_to_f32(const void* src, Precision precision, float* dst, std::size_t n,
                    cudaStream_t stream) {
  if (n == 0) return;
  WEFT_DISPATCH_PRECISION(precision, {
    convert_kernel<<<blocks_for(n), 256, 0, stream>>>(static_cast<const T*>(src), dst, n);
  });
}

}  // namespace weft::cuda
