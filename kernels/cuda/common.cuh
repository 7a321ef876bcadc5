#pragma once
// Device helpers shared by the kernels of kernels/cuda: 16-bit loads and stores, warp and
// block reductions, and the dispatch from Precision to a C++ type. Included by .cu files only.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdlib>
#include <utility>

#include "kernels/cuda/precision.hpp"

namespace weft::cuda::detail {

__device__ __forceinline__ float to_float(float v) {
  return v;
}
__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float to_float(__half v) {
  return __half2float(v);
}

template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the whole block; every thread gets the result. `scratch` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = lane < warps ? scratch[lane] : -FLT_MAX;
  return warp_max(v);
}

// Programmatic dependent launch (Hopper). A kernel started by `launch` may begin while the
// kernel before it on the stream is still finishing; it must call `grid_dependency_wait`
// before touching global memory that an earlier kernel writes or reads (only constant inputs,
// such as weights, may be read before it). The wait returns once every earlier kernel has
// completed and its writes are visible, so results do not change. A no-op for kernels
// launched without the attribute.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Whether `launch` asks for programmatic dependent launch: compute capability >= 9 and the
// environment variable WEFT_PDL not "0" (read once).
inline bool pdl_enabled() {
  static const bool on = [] {
    const char* env = std::getenv("WEFT_PDL");
    if (env != nullptr && env[0] == '0') return false;
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return major >= 9;
  }();
  return on;
}

// Whether the products of a few tokens (gemv, gemv_rows, the lanes quantized product) are
// launched with programmatic stream serialization too: pdl_enabled() and WEFT_PDL_PRODUCTS not
// "0" (read once; for comparisons). They load their first weights before waiting.
inline bool pdl_products_enabled() {
  static const bool on = [] {
    const char* env = std::getenv("WEFT_PDL_PRODUCTS");
    return pdl_enabled() && (env == nullptr || env[0] != '0');
  }();
  return on;
}

// kernel<<<grid, block, shared, stream>>>(args...), with programmatic stream serialization
// where `pdl`. The kernel must start with grid_dependency_wait() (see above).
template <class... Params, class... Args>
void launch_with(bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared,
                 cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = pdl ? 1 : 0;
  cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// launch_with(pdl_enabled(), ...).
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared,
            cudaStream_t stream, Args&&... args) {
  launch_with(pdl_enabled(), kernel, grid, block, shared, stream, std::forward<Args>(args)...);
}

}  // namespace weft::cuda::detail

// Runs the statement with `T` bound to the C++ type of the precision.
#define WEFT_DISPATCH_PRECISION(precision, ...)          \
  do {                                                   \
    if ((precision) == ::weft::cuda::Precision::kBF16) { \
      using T = __nv_bfloat16;                           \
      __VA_ARGS__;                                       \
    } else {                                             \
      using T = __half;                                  \
      __VA_ARGS__;                                       \
    }                                                    \
  } while (0)
