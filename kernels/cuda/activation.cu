#include "kernels/cuda/activation.hpp"
#include "kernels/cuda/common.cuh"

namespace weft::cuda {
namespace {

__device__ __forceinline__ float activate(ActivationKind kind, float x) {
  switch (kind) {
    case ActivationKind::kSilu:
      return x / (1.0f + expf(-x));
    case ActivationKind::kGelu:  // exact, erf form (torch's default)
      return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case ActivationKind::kGeluTanh: {
      const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.0f + tanhf(inner));
    }
    case ActivationKind::kRelu:
      return x > 0.0f ? x : 0.0f;
  }
  return x;
}

template <class T, class In>
__global__ void mlp_activation_kernel(ActivationKind kind, bool gated, const In* in,
                                      const float* bias, int width, T* out) {
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

}  // namespace

void mlp_activation(ActivationKind kind, bool gated, const float* in, const float* bias, int tokens,
                    int width, void* out, Precision precision, cudaStream_t stream) {
  if (tokens == 0) return;
  const dim3 grid((width + 255) / 256, tokens);
  WEFT_DISPATCH_PRECISION(precision, {
    mlp_activation_kernel<T, float>
        <<<grid, 256, 0, stream>>>(kind, gated, in, bias, width, static_cast<T*>(out));
  });
}

void mlp_activation16(ActivationKind kind, bool gated, const void* in, const float* bias,
                      int tokens, int width, void* out, Precision precision, cudaStream_t stream) {
  if (tokens == 0) return;
  const dim3 grid((width + 255) / 256, tokens);
  WEFT_DISPATCH_PRECISION(precision, {
    mlp_activation_kernel<T, T><<<grid, 256, 0, stream>>>(
        kind, gated, static_cast<const T*>(in), bias, width, static_cast<T*>(out));
  });
}

}  // namespace weft::cuda
