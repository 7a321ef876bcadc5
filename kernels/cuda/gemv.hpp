#pragma once
// Products with few tokens (decode at small batch): y[t, o] = sum_k x[t, k] * w[o, k] for
// t < tokens <= kGemvMaxTokens, streaming each weight row once with 16-byte loads, fp32
// accumulation and fp32 output, as Blas::linear (which calls this for small steps). cuBLAS
// at one to a few rows does not reach the memory bandwidth these products are bound by.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/activation.hpp"
#include "kernels/cuda/ll_push.hpp"
#include "kernels/cuda/precision.hpp"

namespace weft::cuda {

inline constexpr int kGemvMaxTokens = 8;

// Whether gemv() takes these operands: 1..kGemvMaxTokens tokens, in_features a multiple of 8,
// x and w 16-byte aligned.
inline bool gemv_supported(const void* x, int tokens, const void* w, int in_features) {
  return tokens >= 1 && tokens <= kGemvMaxTokens && in_features % 8 == 0 &&
         reinterpret_cast<std::uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(w) % 16 == 0;
}

// x is [tokens, in] and w [out, in] in `precision`; y is [tokens, out] fp32 with row stride
// ldy. Deterministic: the summation order depends only on in_features and the row.
// `push` (a row-parallel product under tensor parallelism; ll_push.hpp): where
// push->takes(tokens, out_features), every output also goes, flagged, into the peers' LL
// receive areas for the fused all-reduce launched next (AllReduceNormArgs::pushed); else
// ignored. y gets the same values either way.
void gemv(const void* x, int tokens, const void* w, int out_features, int in_features, float* y,
          int ldy, Precision precision, cudaStream_t stream, const LlPush* push = nullptr);

// The gated MLP's gate_up product of one or two tokens ending in its activation: w is
// [out_features, in] with the gate rows first and the up rows after (out_features / 2 each, as
// the model stores gate_up); act[t, j] = activation(gate[t, j]) * up[t, j] rounded to
// `precision`, [tokens, out_features / 2]. The sums are gemv's and the activation
// mlp_activation's (fp32 inputs, no bias), so act has the bits of gemv into fp32 rows and then
// mlp_activation, one launch less per layer.
inline constexpr int kGemvGatedMaxTokens = 2;
// gemv_supported, 1..kGemvGatedMaxTokens tokens, an even out_features, and WEFT_GEMV_GATED not
// "0" (for comparisons).
bool gemv_gated_supported(const void* x, int tokens, const void* w, int out_features,
                          int in_features);
void gemv_gated(ActivationKind kind, const void* x, int tokens, const void* w, int out_features,
                int in_features, void* act, Precision precision, cudaStream_t stream);

}  // namespace weft::cuda
