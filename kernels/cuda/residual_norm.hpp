#pragma once
// Residual-stream operations the pre-norm add_norm (norm.hpp) does not cover: post-norm
// layers (OPT-350m: the residual itself is normalized), the norm right after the embedding
// (Bloom), parallel attention and MLP (Falcon: both outputs are added to the residual), and
// feeding un-normalized rows to a product (post-norm networks have no final norm).

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/norm.hpp"
#include "kernels/cuda/precision.hpp"

namespace weft::cuda {

struct ResidualNormArgs {
  float* residual = nullptr;          // [rows, n] fp32, normalized in place
  const float* delta = nullptr;       // [rows, n] added first, or null
  const float* delta_bias = nullptr;  // [n] added with delta, or null
  int rows = 0;
  int n = 0;
  NormKind kind = NormKind::kLayer;
  const float* weight = nullptr;  // [n]
  const float* bias = nullptr;    // [n] or null
  float eps = 1e-5f;
  void* out = nullptr;  // [rows, n] copy of the result in `precision`, or null
  Precision precision = Precision::kBF16;
};

// residual = norm(residual + delta + delta_bias) * weight (+ bias), fp32, and a 16-bit copy.
void residual_norm(const ResidualNormArgs& args, cudaStream_t stream);

// residual[r, :] += delta[r, :] + bias (bias may be null).
void add_residual(float* residual, const float* delta, const float* bias, int rows, int n,
                  cudaStream_t stream);

// out[r, :] = (precision) x[row_index[r], :] (row_index null: row r).
void rows_to_precision(const float* x, const std::int32_t* row_index, int rows, int n, void* out,
                       Precision precision, cudaStream_t stream);

}  // namespace weft::cuda
