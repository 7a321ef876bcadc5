#pragma once
// Element-wise activations and the gated MLP's combination step.

#include <cstddef>

namespace weft::cpu {

enum class ActivationKind { kSilu, kGelu, kGeluTanh, kRelu };

float activate(ActivationKind kind, float x) noexcept;

// x[i] = act(x[i])
void activate_inplace(ActivationKind kind, float* x, std::size_t n) noexcept;

// gate[i] = act(gate[i]) * up[i]: the gated MLP (SwiGLU when kind is kSilu, Shazeer 2020).
void gated_activation(ActivationKind kind, float* gate, const float* up, std::size_t n) noexcept;

}  // namespace weft::cpu
