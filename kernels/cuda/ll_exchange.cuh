#pragma once
// The LL exchange's lines (tp_fused.cu, and the products that push into it: ll_push.hpp).
//
// Receive area of a rank: [2 parities][ranks senders][rows][width / 2] lines of 16 bytes, each
// two (value, flag) pairs; the flag is the epoch of the fused launch the values belong to. A
// pair of 8 bytes lands whole, so a line whose two flags match holds that launch's values.
// Row t's launches count in this rank's epoch counter t: 1, 2, ... (0 is the zeroed area's
// flag, so a wrapping count goes on at 2, keeping the parity alternating).

#include <cstddef>

namespace weft::cuda::detail {

// The epoch of the next launch of a row whose counter reads `counter`.
__device__ __forceinline__ unsigned ll_next_epoch(unsigned counter) {
  const unsigned e = counter + 1;
  return e == 0 ? 2u : e;
}

// The byte offset, within a receive area, of sender `sender`'s row `row` in parity `parity`.
__device__ __forceinline__ std::size_t ll_row_bytes(int ranks, int rows, int width, unsigned parity,
                                                    int sender, int row) {
  return ((static_cast<std::size_t>(parity) * ranks + sender) * rows + row) *
         static_cast<std::size_t>(width) * 8;
}

// Stores and loads of lines: volatile (relaxed at system scope), never cached in L1 nor taken
// through the read-only path: the lines are rewritten by other GPUs between launches.
__device__ __forceinline__ void ll_store_line(uint4* p, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ uint4 ll_load_line(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}
// One word, as ll_load_line (the epoch counters; tp_fused.cu's scalar loads of peers' rows).
__device__ __forceinline__ unsigned ll_load_counter(const unsigned* p) {
  unsigned v;
  asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// The line of values (a, b) flagged with epoch e.
__device__ __forceinline__ uint4 ll_line(float a, float b, unsigned e) {
  return make_uint4(__float_as_uint(a), e, __float_as_uint(b), e);
}

}  // namespace weft::cuda::detail
