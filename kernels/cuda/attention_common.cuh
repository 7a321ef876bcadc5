#pragma once
// Device helpers shared by the paged attention kernels (the per-split decode and prefill kernels
// of decode_attention_split*.cu and prefill_attention*.cu, the pipelined and streaming decode
// kernels of decode_attention.cu and decode_attention_stream.cu): positions a query attends to, how
// a decode context is cut into splits, where a key row lives in the page pool, cp.async copies, and
// the mma.sync m16n8k16 product with its 16-bit packing. Included by .cu files only.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/paged_kv.hpp"
#include "kernels/cuda/tree_slots.cuh"

namespace weft::cuda::detail {

// The first position a query at `pos` attends to (sliding window `window`, 0: none).
__host__ __device__ __forceinline__ int first_position(int pos, int window) {
  return window > 0 && pos + 1 > window ? pos + 1 - window : 0;
}

// Positions per split for a context of `span` positions (see kDecodeSplitQuantum).
__host__ __device__ __forceinline__ int split_positions(int span) {
  const int per = (span + kMaxDecodeSplits - 1) / kMaxDecodeSplits;
  return (per + kDecodeSplitQuantum - 1) / kDecodeSplitQuantum * kDecodeSplitQuantum;
}

// Offset in elements of position p's key row for kv head h; the value row is
// num_kv_heads * page_size * head_dim further.
__device__ __forceinline__ std::size_t key_offset(const PagedKvView& kv, const std::int32_t* table,
                                                  int p, int h) {
  const int page = table[p / kv.page_size];
  return static_cast<std::size_t>(page) * kv.page_elems + kv.layer_offset +
         (static_cast<std::size_t>(h) * kv.page_size + p % kv.page_size) * kv.head_dim;
}

// The same for a decode query's view of its page table (a token tree's path remapped).
__device__ __forceinline__ std::size_t key_offset(const PagedKvView& kv, const SlotTable& table,
                                                  int p, int h) {
  return key_offset(kv, table.pages, table.slot(p), h);
}

// 16 bytes from global to shared memory without passing through registers (zeros where
// `live` is false); commit closes a group, wait<N> returns once at most N groups are pending.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool live) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(live ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// c += a b for one m16n8k16 tile (16-bit inputs, fp32 accumulators).
__device__ __forceinline__ void mma_16816(float* c, const unsigned* a, unsigned b0, unsigned b1,
                                          __nv_bfloat16) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_16816(float* c, const unsigned* a, unsigned b0, unsigned b1,
                                          __half) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as 16-bit values in one register (x in the low half), and what rounding left.
template <class T>
__device__ __forceinline__ unsigned pack2(float x, float y, float& rx, float& ry) {
  const T hx = from_float<T>(x), hy = from_float<T>(y);
  rx = x - to_float(hx);
  ry = y - to_float(hy);
  unsigned short ux, uy;
  memcpy(&ux, &hx, 2);
  memcpy(&uy, &hy, 2);
  return static_cast<unsigned>(ux) | (static_cast<unsigned>(uy) << 16);
}
template <class T>
__device__ __forceinline__ unsigned pack2(float x, float y) {
  float rx, ry;
  return pack2<T>(x, y, rx, ry);
}

}  // namespace weft::cuda::detail
