#pragma once
// Products of a few rows whose every row's result is the same bits whatever the number of
// rows beside it: y[j, o] = sum_k x[j, k] * w[o, k] for j < rows <= kGemvRowsMax. Decode steps
// and speculative verification steps both use it (runtime/model/cuda), so a verified draft
// token's logits are exactly those plain decoding gives that token, and a verification step
// of a few rows reads the weights once, as one decode step does.
//
// Tensor cores (mma.sync m16n8k16, 16-bit inputs, fp32 accumulators): a block of 4 warps
// takes 16 weight rows; warp w takes the 32-element chunks w, w + 4, ... of those rows (16
// bytes per lane and row, streamed past L1), the x rows are the products' 8-wide columns (one
// to four tiles of 8), and the four warps' sums are added in warp order. Each output element
// is the dot product of one weight row and one x row, accumulated over the same chunks in
// the same order for any row count: the other columns of a tile never enter it.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/precision.hpp"

namespace weft::cuda {

inline constexpr int kGemvRowsMax = 32;

// Whether gemv_rows takes these operands: 1..kGemvRowsMax rows, in_features a multiple of
// 32, x and w 16-byte aligned.
inline bool gemv_rows_supported(const void* x, int rows, const void* w, int in_features) {
  return rows >= 1 && rows <= kGemvRowsMax && in_features % 32 == 0 &&
         reinterpret_cast<std::uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(w) % 16 == 0;
}

// x is [*, in] and w [out, in] in `precision`; y is [*, out] fp32 with row stride ldy. Row j of
// the product is row row_index[j] of x and of y ([rows] on the device), or row j where
// row_index is null (the rows of a step that go through this kernel while cuBLAS computes the
// others, e.g. decode rows beside a prefill chunk: their bits must not depend on it).
void gemv_rows(const void* x, int rows, const std::int32_t* row_index, const void* w,
               int out_features, int in_features, float* y, int ldy, Precision precision,
               cudaStream_t stream);

}  // namespace weft::cuda
