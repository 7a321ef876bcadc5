#pragma once
// The MLP activations of activation.hpp as device functions, shared by the activation kernels
// (activation.cu) and the quantized gate_up product that applies them itself
// (quant_gemv_mma.cu). Included by .cu files only.

#include <cuda_runtime.h>

#include "kernels/cuda/activation.hpp"

namespace weft::cuda::detail {

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

}  // namespace weft::cuda::detail
