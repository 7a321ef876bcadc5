#pragma once
// What each tensor-core decode attention kernel (the per-split kernel of decode_attention_split.cu,
// the pipelined kernel of decode_attention.cu, the streaming kernel of
// decode_attention_stream.cu) does before its tile loop: load head g's query, and with
// AttentionArgs::rope_inv_freq do rope_store_kv's work for the token (the rotary table for q,
// the token's own key rotated and its key and value stored into the page slot). One copy, so
// the three kernels round and store alike, bitwise as rope_store_kv does (rope.cuh). Included
// by .cu files only.

#include <cstddef>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/decode_tile.cuh"
#include "kernels/cuda/rope.cuh"

namespace weft::cuda::detail {

// Head g's query for query_fragments: x[c][e] = element 32c + 8tq + e of query head
// kvh * G + g of token t (zeros for g >= G). Plain loads, issued before any barrier so they
// are in flight while the block prepares the rest.
template <int D>
__device__ __forceinline__ void load_query(float (&x)[D / 32][8], const AttentionArgs& a, int t,
                                           int kvh, int G, int g, int tq) {
  const float* qp = a.q + static_cast<std::size_t>(t) * a.q_stride +
                    static_cast<std::size_t>(kvh) * G * D + static_cast<std::size_t>(g) * D;
#pragma unroll
  for (int c = 0; c < D / 32; ++c)
#pragma unroll
    for (int e = 0; e < 8; ++e)
      x[c][e] = g < G ? qp[32 * c + 8 * tq + e] : 0.0f;
}

// With a.rope_inv_freq (`rope`), rope_store_kv's work for token t at position pos and kv head
// kvh, in L = D/8 chunks of 16 bytes a row:
// - rope_c, rope_s [D/2]: the token's cos and sin per pair, for query_fragments;
// - when `own_kv` (the block's keys end at the token's own position): the token's key rotated
//   (pairs (i, i + D/2)), key and value rounded to T and stored into the page slot, and kept
//   in `own` so the caller can patch them into its staged tile (its copy may have read the
//   slot before the store): threads [0, L/2) hold key chunks c and c + L/2 in own[0], own[1],
//   threads [L/2, 3L/2) value chunk c - L/2 in own[0]; with kOwnShared, also the key row at
//   own_s[0, L) and the value row at own_s[L, 2L) (shared memory; the caller syncs before
//   reading it).
// The token's row is loaded before the table's barrier, so those loads are in flight
// meanwhile. Block-wide: every thread of the block (kThreads) calls it; `rope` and `own_kv`
// are the same for all of them.
template <class T, int D, int kThreads, bool kOwnShared = false>
__device__ __forceinline__ void rope_own_kv(const AttentionArgs& a, const FlatBatchView& b,
                                            const PagedKvView& kv, const SlotTable& table, int t,
                                            int pos, int kvh, bool rope, bool own_kv, float* rope_c,
                                            float* rope_s, uint4 (&own)[2],
                                            uint4* own_s = nullptr) {
  constexpr int L = D / 8;
  static_assert(3 * L / 2 <= kThreads, "the token's own row is made by 3L/2 threads");
  const bool maker = own_kv && threadIdx.x < 3 * L / 2;
  // The key (chunks c and c + L/2) or value (chunk c) as the qkv product wrote it.
  float raw[16];
  if (maker) {
    const float* row = a.q + static_cast<std::size_t>(t) * a.q_stride +
                       static_cast<std::size_t>(a.num_heads + kvh) * D;
    const int c = threadIdx.x < L / 2 ? threadIdx.x : threadIdx.x - L / 2;
    const float* at = threadIdx.x < L / 2
                          ? row + 8 * c
                          : row + static_cast<std::size_t>(kv.num_kv_heads) * D + 8 * c;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      raw[e] = at[e];
      raw[8 + e] = threadIdx.x < L / 2 ? at[D / 2 + e] : 0.0f;
    }
  }
  if (rope) {
    const int seq = b.token_seq[t];
    const float* freq = a.rope_inv_freq + static_cast<std::size_t>(seq) * (D / 2);
    const float factor = a.rope_factor[seq];
    for (int j = threadIdx.x; j < D / 2; j += kThreads)
      rope_cos_sin(pos, freq[j], factor, rope_c[j], rope_s[j]);
    __syncthreads();
  }
  if (!maker) return;
  T* dst = const_cast<T*>(static_cast<const T*>(kv.pool)) + key_offset(kv, table, pos, kvh);
  auto pack8 = [](const float(&f)[8]) {
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float r0, r1;
      w[i] = pack2<T>(f[2 * i], f[2 * i + 1], r0, r1);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  };
  if (threadIdx.x < L / 2) {
    const int c = threadIdx.x;
    float y0[8], y1[8];
#pragma unroll
    for (int e = 0; e < 8; ++e)
      rotate_pair(raw[e], raw[8 + e], rope_c[8 * c + e], rope_s[8 * c + e], y0[e], y1[e]);
    own[0] = pack8(y0);
    own[1] = pack8(y1);
    reinterpret_cast<uint4*>(dst)[c] = own[0];
    reinterpret_cast<uint4*>(dst)[c + L / 2] = own[1];
    if constexpr (kOwnShared) {
      own_s[c] = own[0];
      own_s[c + L / 2] = own[1];
    }
  } else {
    const int c = threadIdx.x - L / 2;
    float v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e)
      v[e] = raw[e];
    own[0] = pack8(v);
    const std::size_t v_shift = static_cast<std::size_t>(kv.num_kv_heads) * kv.page_size * D;
    reinterpret_cast<uint4*>(dst + v_shift)[c] = own[0];
    if constexpr (kOwnShared) own_s[L + c] = own[0];
  }
}

// The token's own key and value (`own`, from rope_own_kv) into their rows of a staged tile,
// by the threads that made them: `row` is the key's row of L chunks, the value's row is
// TP * L chunks further, and chunk c is stored at c ^ sw (tile_swizzle of the row, or 0 for
// unswizzled tiles). The caller syncs before the tile is read.
template <int L, int TP>
__device__ __forceinline__ void patch_own_row(uint4* row, int sw, const uint4 (&own)[2]) {
  if (threadIdx.x < L / 2) {
    row[threadIdx.x ^ sw] = own[0];
    row[(threadIdx.x + L / 2) ^ sw] = own[1];
  } else if (threadIdx.x < 3 * L / 2) {
    row[TP * L + ((threadIdx.x - L / 2) ^ sw)] = own[0];
  }
}

}  // namespace weft::cuda::detail
