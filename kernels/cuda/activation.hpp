#pragma once
// The MLP's activation between its two products, reading the fp32 output of the up (or
// fused gate_up) projection, adding its bias, and writing the 16-bit input of the down
// projection.

#include <cuda_runtime_api.h>

#include "kernels/cuda/precision.hpp"

namespace weft::cuda {

enum class ActivationKind { kSilu, kGelu, kGeluTanh, kRelu };

// Gated (SwiGLU with kSilu, GeGLU with kGelu/kGeluTanh): in is [tokens, 2 * width] with the
// gate in the first half of each row and up in the second (a fused gate_up product);
// out[t, i] = act(gate + gate_bias) * (up + up_bias). bias is [2 * width] or null.
// Not gated: in is [tokens, width]; out = act(in + bias).
void mlp_activation(ActivationKind kind, bool gated, const float* in, const float* bias, int tokens,
                    int width, void* out, Precision precision, cudaStream_t stream);

// The same with `in` in `precision` (a product written as 16 bits by Blas::linear16).
void mlp_activation16(ActivationKind kind, bool gated, const void* in, const float* bias,
                      int tokens, int width, void* out, Precision precision, cudaStream_t stream);

}  // namespace weft::cuda
