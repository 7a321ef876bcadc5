#pragma once
// RMSNorm and LayerNorm fused with the residual add that precedes them. The residual stream
// stays fp32 on the device (as the CPU forward keeps it); the normalized output is 16-bit,
// ready for the next matrix product.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/precision.hpp"

namespace weft::cuda {

enum class NormKind { kRms, kLayer };

struct AddNormArgs {
  float* residual = nullptr;     // [rows_in, n] fp32
  const float* delta = nullptr;  // [rows_in, n] fp32 added to the residual first, or null
  // Or the delta as 16-bit rows in `precision` (a bf16 all-reduce's sums; 8-byte aligned),
  // widened exactly as it is read: the same results as delta holding the widened values.
  const void* delta16 = nullptr;
  const float* delta_bias = nullptr;  // [n] added with delta (a projection's bias), or null
  // Output row r reads input row row_index[r]; null: row r. Lets the final norm run only on
  // the rows that need logits.
  const std::int32_t* row_index = nullptr;
  int rows = 0;  // output rows
  int n = 0;
  NormKind kind = NormKind::kRms;
  const float* weight = nullptr;  // [n]
  const float* bias = nullptr;    // [n] LayerNorm bias, or null
  float eps = 1e-5f;
  // Store residual + delta back into the residual (every layer but the last, whose sum is
  // only needed for the rows that get logits).
  bool write_back = true;
  void* out = nullptr;  // [rows, n] in `precision`
  Precision precision = Precision::kBF16;
};

// residual += delta + delta_bias (when delta is given); out = norm(residual) * weight (+ bias).
// RMS: x / sqrt(mean(x^2) + eps); Layer: (x - mean) / sqrt(var + eps), both in fp32.
void add_norm(const AddNormArgs& args, cudaStream_t stream);

// Whether add_norm over rows of n reads delta16 with bitwise the results of `delta` holding
// its widened values: rows of up to 4096 (the kernels that hold a row in registers; checked by
// kernels_test on every precision). Wider rows read it correctly, but the compiled code may
// round the norm's last bit differently (measured: 1 ulp of fp16 in 2 of 20,000 elements).
inline bool add_norm_delta16_exact(int n) {
  return n >= 1 && n <= 4096;
}

}  // namespace weft::cuda
