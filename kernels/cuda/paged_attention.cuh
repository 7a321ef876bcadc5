#pragma once
// Device helpers shared by the per-split decode kernels (decode_attention_split.cu: the
// tensor-core kernel and the combine; decode_attention_split_cuda_core.cu: the CUDA-core
// kernels) and the prefill kernels (prefill_attention.cu, prefill_attention_mma.cu): the decode
// block size and the group a block scores from registers, the keys a prefill tile or a decode
// split attends to, and the scales of int8/fp8 rows. Included by .cu files only.

#include <cstdint>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/kv_element.cuh"
#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/paged_kv.hpp"
#include "kernels/cuda/tree_slots.cuh"

namespace weft::cuda::detail {

inline constexpr int kDecodeThreads = 128;      // also the tile of positions one pass scores
inline constexpr int kMaxGroupInRegisters = 8;  // query heads per kv head scored from registers

// The keys a prefill tile of `count` query rows (positions pos[0..count)) attends to:
// [lo, hi], the union of each row's causal, sliding-window span.
__device__ __forceinline__ void tile_key_range(const int* pos, int count, int window, int& lo,
                                               int& hi) {
  lo = INT_MAX;
  hi = -1;
  for (int r = 0; r < count; ++r) {
    lo = min(lo, first_position(pos[r], window));
    hi = max(hi, pos[r]);
  }
}

// The positions [begin, end) that split blockIdx.z of decode query blockIdx.y attends to (the
// cut depends only on the token's own context); begin > pos where the token's context has
// fewer splits than the grid.
struct DecodeSpan {
  int t, pos, begin, end;
};
__device__ __forceinline__ DecodeSpan decode_span(const AttentionArgs& a, const FlatBatchView& b,
                                                  const std::int32_t* query_tokens) {
  const int t = query_tokens[blockIdx.y];
  const int split = blockIdx.z, splits = gridDim.z;
  const int pos = b.positions[t];
  const int first = first_position(pos, a.sliding_window);
  const int chunk = split_positions(pos + 1 - first);
  const int begin = splits > 1 ? first + split * chunk : first;
  const int end = splits > 1 ? min(pos + 1, begin + chunk) : pos + 1;
  return {t, pos, begin, end};
}

// int8/fp8 pages: the scale of position p's key row for kv head h (`value`: its value row's).
__device__ __forceinline__ float row_scale(const PagedKvView& kv, const std::int32_t* table, int p,
                                           int h, bool value) {
  const int page = table[p / kv.page_size];
  const int row = ((value ? kv.num_kv_heads : 0) + h) * kv.page_size + p % kv.page_size;
  return detail::kv_scales(kv, page)[row];
}

// The same for a decode query's view of its page table (a token tree's path remapped).
__device__ __forceinline__ float row_scale(const PagedKvView& kv, const SlotTable& table, int p,
                                           int h, bool value) {
  return row_scale(kv, table.pages, table.slot(p), h, value);
}

}  // namespace weft::cuda::detail
