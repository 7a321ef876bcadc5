#include <cstdint>
#include <cstring>

#include "kernels/cuda/activation.cuh"
#include "kernels/cuda/activation.hpp"
#include "kernels/cuda/common.cuh"

namespace weft::cuda {
namespace {

using detail::activate;

template <class T, class In>
__global__ void mlp_activation_kernel(ActivationKind kind, bool gated, const In* in,
                                      const float* bias, int width, T* out) {
  detail::grid_dependency_wait();
  const std::size_t t = blockIdx.y;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= width) return;
  float v;
  if (gated) {
    const In* row = in + t * 2 * width;
    float gate = detail::to_float(row[i]), up = detail::to_float(row[width + i]);
    if (bias != nullptr) {
      gate += bias[i];
      up += bias[width + i];
    }
    v = activate(kind, gate) * up;
  } else {
    v = detail::to_float(in[t * width + i]) + (bias != nullptr ? bias[i] : 0.0f);
    v = activate(kind, v);
  }
  out[t * width + i] = detail::from_float<T>(v);
}

// Gated, 16-bit input, width a multiple of 8: a thread takes 8 elements (16-byte loads and
// stores); the same arithmetic per element as mlp_activation_kernel.
template <class T>
__global__ void gated_activation16_kernel(ActivationKind kind, const T* in, int width, T* out) {
  detail::grid_dependency_wait();
  const std::size_t t = blockIdx.y;
  const int i = (blockIdx.x * blockDim.x + threadIdx.x) * 8;
  if (i >= width) return;
  const T* row = in + t * 2 * width;
  const uint4 g4 = *reinterpret_cast<const uint4*>(row + i);
  const uint4 u4 = *reinterpret_cast<const uint4*>(row + width + i);
  T g[8], u[8], y[8];
  memcpy(g, &g4, 16);
  memcpy(u, &u4, 16);
#pragma unroll
  for (int k = 0; k < 8; ++k)
    y[k] = detail::from_float<T>(activate(kind, detail::to_float(g[k])) * detail::to_float(u[k]));
  uint4 y4;
  memcpy(&y4, y, 16);
  *reinterpret_cast<uint4*>(out + t * width + i) = y4;
}

}  // namespace

void mlp_activation(ActivationKind kind, bool gated, const float* in, const float* bias, int tokens,
                    int width, void* out, Precision precision, cudaStream_t stream) {
  if (tokens == 0) return;
  const dim3 grid((width + 255) / 256, tokens);
  WEFT_DISPATCH_PRECISION(precision, {
    detail::launch(mlp_activation_kernel<T, float>, grid, 256, 0, stream, kind, gated, in, bias,
                   width, static_cast<T*>(out));
  });
}

void mlp_activation16(ActivationKind kind, bool gated, const void* in, const float* bias,
                      int tokens, int width, void* out, Precision precision, cudaStream_t stream) {
  if (tokens == 0) return;
  if (gated && bias == nullptr && width % 8 == 0 &&
      reinterpret_cast<std::uintptr_t>(in) % 16 == 0 &&
      reinterpret_cast<std::uintptr_t>(out) % 16 == 0) {
    const dim3 grid((width / 8 + 255) / 256, tokens);
    WEFT_DISPATCH_PRECISION(precision, {
      detail::launch(gated_activation16_kernel<T>, grid, 256, 0, stream, kind,
                     static_cast<const T*>(in), width, static_cast<T*>(out));
    });
    return;
  }
  const dim3 grid((width + 255) / 256, tokens);
  WEFT_DISPATCH_PRECISION(precision, {
    detail::launch(mlp_activation_kernel<T, T>, grid, 256, 0, stream, kind, gated,
                   static_cast<const T*>(in), bias, width, static_cast<T*>(out));
  });
}

}  // namespace weft::cuda
