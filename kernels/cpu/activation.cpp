#include "kernels/cpu/activation.hpp"

#include <cmath>

namespace weft::cpu {

float activate(ActivationKind kind, float x) noexcept {
  switch (kind) {
    case ActivationKind::kSilu:
      return x / (1.0f + std::exp(-x));
    case ActivationKind::kGelu:  // exact, erf form (torch's default)
      return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
    case ActivationKind::kGeluTanh: {
      const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.0f + std::tanh(inner));
    }
    case ActivationKind::kRelu:
      return x > 0.0f ? x : 0.0f;
  }
  return x;
}

void activate_inplace(ActivationKind kind, float* x, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    x[i] = activate(kind, x[i]);
}

void gated_activation(ActivationKind kind, float* gate, const float* up, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    gate[i] = activate(kind, gate[i]) * up[i];
}

}  // namespace weft::cpu
