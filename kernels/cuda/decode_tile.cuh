#pragma once
// Device code shared by the tensor-core decode attention kernels: the per-split kernel of
// decode_attention_split.cu (decode_kernel_tc), the pipelined kernel of decode_attention.cu and the
// streaming kernel of decode_attention_stream.cu. One warp's step over 16 keys of a tile
// (S = qK^T with mma.sync, the online softmax update, O += PV), the tile rows' swizzle, the
// fold of splits in order (in the block, or by a combine kernel from the records) and, for the
// pipelined and streaming kernels, how a token's context is cut into pieces. Each kernel calls
// these, so all three do the same arithmetic in the same order. Included by .cu files only.

#include <cfloat>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/rope.cuh"

namespace weft::cuda::detail {

// Positions per piece (split or segment) of the pipelined and streaming kernels for a context
// of `span` positions: the per-split kernel's cut (at most kMaxDecodeSplits pieces, multiples
// of 64), or `min_piece` (a multiple of 64) if larger.
__host__ __device__ __forceinline__ int piece_positions(int span, int min_piece) {
  const int chunk = split_positions(span);
  return chunk > min_piece ? chunk : min_piece;
}

// Query qi's token t at position pos: its context [first, pos] cut into `used` pieces of
// `size` positions (piece_positions).
struct TokenPieces {
  int t, pos, first, size, used;
};
__device__ __forceinline__ TokenPieces token_pieces(const AttentionArgs& a, const FlatBatchView& b,
                                                    const std::int32_t* query_tokens, int qi,
                                                    int min_piece) {
  TokenPieces s;
  s.t = query_tokens[qi];
  s.pos = b.positions[s.t];
  s.first = first_position(s.pos, a.sliding_window);
  const int span = s.pos + 1 - s.first;
  s.size = piece_positions(span, min_piece);
  s.used = (span + s.size - 1) / s.size;
  return s;
}

// Shared-memory swizzle of a tile row's 16-byte chunks: chunk c of row r is stored at
// c ^ tile_swizzle(r), so a quarter warp's K fragment reads (2 rows, 4 chunks) and V reads
// (4 rows 2 apart, 2 chunks) fall in distinct banks for head_dim 128. Values < 8, so it stays
// inside rows of 8, 16 or 32 chunks.
__device__ __forceinline__ int tile_swizzle(int r) {
  return (((r ^ (r >> 2)) & 1) << 2) | ((r >> 1) & 1);
}

// One step of the fold of a token's splits (or segments) in order: updates the running max M
// and sum L with split s's (m_s, l_s) and returns the factors a (for what was folded) and b
// (for split s). Every rounding spelled out, so the block and the combine kernel fold bitwise
// alike.
__device__ __forceinline__ void fold_split(float& M, float& L, float ms, float ls, float& fa,
                                           float& fb) {
  const float m_new = fmaxf(M, ms);
  fa = expf(M - m_new);
  fb = expf(ms - m_new);
  L = __fmaf_rn(ls, fb, __fmul_rn(L, fa));
  M = m_new;
}
__device__ __forceinline__ float fold_acc(float acc, float os, float fa, float fb) {
  return __fmaf_rn(os, fb, __fmul_rn(acc, fa));
}

// Where split s of head h of query qi keeps its record in the workspace: D accumulators,
// then m and l ([query][head][split] records of D + 2 floats, as the per-split kernel writes).
__device__ __forceinline__ float* split_record(float* workspace, int qi, int num_heads, int h,
                                               int splits, int s, int D) {
  return workspace + ((static_cast<std::size_t>(qi) * num_heads + h) * splits + s) * (D + 2);
}

// A split's starting state: no keys yet (acc zero, running max -FLT_MAX, sum 0).
template <int VW>
__device__ __forceinline__ void clear_split(float (&acc)[VW][4], float& m, float& l) {
#pragma unroll
  for (int i = 0; i < VW; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      acc[i][e] = 0.0f;
  m = -FLT_MAX;
  l = 0.0f;
}

// The end of split `split` in a block of kWarps warps (32 lanes each) that ran tile_attend16:
// each warp's (m, l, acc) for the G <= GM heads merged in warp order through shared memory
// (red_acc [kWarps][GM][D], red_m, red_l, fac), then folded in split order into the block's
// fold (fold_max, fold_sum, fo: elements threadIdx.x + k * 32 * kWarps; fold_a, fold_b,
// fold_l) when `whole`, or written as the split's record for kv head kvh otherwise.
template <int D, int GM, int kWarps, int EPT, int VW>
__device__ __forceinline__ void merge_split(int G, int warp, int g, int tq, float m, float l,
                                            const float (&acc)[VW][4], float* red_acc,
                                            float (&red_m)[kWarps][GM], float (&red_l)[kWarps][GM],
                                            float (&fac)[kWarps][GM], float (&fold_a)[GM],
                                            float (&fold_b)[GM], float (&fold_l)[GM], bool whole,
                                            float& fold_max, float& fold_sum, float (&fo)[EPT],
                                            float* workspace, int qi, int NH, int kvh,
                                            int grid_splits, int split) {
  constexpr int kThreads = 32 * kWarps;
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  const int ha = 2 * tq, hb = 2 * tq + 1;
#pragma unroll
  for (int i = 0; i < VW; ++i) {
    const int d0 = g * (D / 8) + 2 * i;  // rows g and g + 8 of tile i
    if (ha < G) {
      red_acc[(warp * GM + ha) * D + d0] = acc[i][0];
      red_acc[(warp * GM + ha) * D + d0 + 1] = acc[i][2];
    }
    if (hb < G) {
      red_acc[(warp * GM + hb) * D + d0] = acc[i][1];
      red_acc[(warp * GM + hb) * D + d0 + 1] = acc[i][3];
    }
  }
  if (tq == 0 && g < G) {
    red_m[warp][g] = m;
    red_l[warp][g] = l;
  }
  __syncthreads();
  if (threadIdx.x < G) {
    const int h = threadIdx.x;
    float mm = red_m[0][h];
#pragma unroll
    for (int w = 1; w < kWarps; ++w)
      mm = fmaxf(mm, red_m[w][h]);
    float ll = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float f = expf(red_m[w][h] - mm);
      fac[w][h] = f;
      ll += red_l[w][h] * f;
    }
    if (whole) {
      fold_split(fold_max, fold_sum, mm, ll, fold_a[h], fold_b[h]);
      fold_l[h] = fold_sum;
    } else {
      float* rec = split_record(workspace, qi, NH, kvh * G + h, grid_splits, split, D);
      rec[D] = mm;
      rec[D + 1] = ll;
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < EPT; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i < G * D) {
      const int h = i / D, d = i % D;
      float o = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w)
        o += red_acc[(w * GM + h) * D + d] * fac[w][h];
      if (whole) {
        fo[k] = fold_acc(fo[k], o, fold_a[h], fold_b[h]);
      } else {
        split_record(workspace, qi, NH, kvh * G + h, grid_splits, split, D)[d] = o;
      }
    }
  }
}

// A block that folded every piece of token t's context (merge_split with `whole`) writes
// kv head kvh's G query heads: elements threadIdx.x + k * kThreads of [G][D] from `fo`, each
// divided by its head's sum (fold_l).
template <class T, int D, int EPT, int kThreads>
__device__ __forceinline__ void write_folded(const AttentionArgs& a, int t, int kvh, int G,
                                             const float (&fo)[EPT], const float* fold_l) {
  T* out = static_cast<T*>(a.out) + static_cast<std::size_t>(t) * a.num_heads * D +
           static_cast<std::size_t>(kvh) * G * D;
#pragma unroll
  for (int k = 0; k < EPT; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i < G * D) out[i] = from_float<T>(fo[k] / fold_l[i / D]);
  }
}

// The combine kernels' work for head h of token t whose context was cut into `used` pieces
// over more than one block: the pieces' records (split_record's layout; `recs` is piece 0 of
// head h) folded in order with fold_split and fold_acc, bitwise as a block that folds every
// piece itself, and the head's D outputs written. Block-wide (any block size).
template <class T>
__device__ __forceinline__ void fold_records(const AttentionArgs& a, int t, int h, int D, int used,
                                             const float* recs) {
  __shared__ float ms[kMaxDecodeSplits], ls[kMaxDecodeSplits];
  __shared__ float fa[kMaxDecodeSplits], fb[kMaxDecodeSplits];
  __shared__ float total;
  if (threadIdx.x < used) {  // every piece's m and l loaded at once
    ms[threadIdx.x] = recs[threadIdx.x * (D + 2) + D];
    ls[threadIdx.x] = recs[threadIdx.x * (D + 2) + D + 1];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float M = -INFINITY, L = 0.0f;
    for (int s = 0; s < used; ++s)
      fold_split(M, L, ms[s], ls[s], fa[s], fb[s]);
    total = L;
  }
  __syncthreads();
  T* out = static_cast<T*>(a.out) + static_cast<std::size_t>(t) * a.num_heads * D +
           static_cast<std::size_t>(h) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < used; ++s)
      o = fold_acc(o, recs[s * (D + 2) + d], fa[s], fb[s]);
    out[d] = from_float<T>(o / total);
  }
}

// The A fragments of q * scale for head g (rows 8-15 of the m16 tile are zero): x[c][e] holds
// element 32c + 8tq + e of the head's query; rotated first (pairs j, j + D/2 by rope_c[j],
// rope_s[j]) when `rotate`. qh: the 16-bit values, ql: what their rounding left.
template <class T, int KC>
__device__ __forceinline__ void query_fragments(float (&x)[KC][8], bool rotate, int tq,
                                                const float* rope_c, const float* rope_s,
                                                float scale, unsigned (&qh)[KC][4],
                                                unsigned (&ql)[KC][4]) {
  if (rotate) {
    // Element 32c + 8tq + e pairs with the same slot of chunk c + KC/2 (D/2 further).
#pragma unroll
    for (int c = 0; c < KC / 2; ++c)
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int j = 32 * c + 8 * tq + e;
        rotate_pair(x[c][e], x[c + KC / 2][e], rope_c[j], rope_s[j], x[c][e], x[c + KC / 2][e]);
      }
  }
#pragma unroll
  for (int c = 0; c < KC; ++c) {
#pragma unroll
    for (int e = 0; e < 8; ++e)
      x[c][e] *= scale;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      float r0, r1;
      qh[c][w] = pack2<T>(x[c][2 * w], x[c][2 * w + 1], r0, r1);
      ql[c][w] = pack2<T>(r0, r1);
    }
  }
}

// One warp's step over the 16 keys k0 .. k0 + 15 held in rows i0 .. i0 + 15 of the K tile `ks`
// and the V tile `vs` (L 16-byte chunks a row, swizzled by tile_swizzle when kSwizzled): S = qK^T
// with the query as split 16-bit halves (qh + ql) through mma.sync m16n8k16, keys >= end masked,
// the running max m and sum l of head g updated, and acc (O^T, VW row tiles) rescaled and
// increased by PV with P split the same way. Lane (g, tq) = (lane / 4, lane % 4) holds head g,
// keys 2tq and 2tq + 1 of each 8.
template <class T, int L, bool kSwizzled, int KC, int VW>
__device__ __forceinline__ void tile_attend16(const uint4* ks, const uint4* vs, int i0, int k0,
                                              int end, int g, int tq, const unsigned (&qh)[KC][4],
                                              const unsigned (&ql)[KC][4], float& m, float& l,
                                              float (&acc)[VW][4]) {
  // S for keys k0 + 8 * blk + (0..7): lane holds head g, keys 2tq and 2tq + 1.
  float sc[2][4];
#pragma unroll
  for (int blk = 0; blk < 2; ++blk) {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      sc[blk][e] = 0.0f;
    const int rr = i0 + 8 * blk + g;
    const uint4* krow;
    int sw = 0;
    if constexpr (kSwizzled) {
      sw = tile_swizzle(rr);
      krow = ks + rr * L;
    } else {
      krow = ks + rr * L + tq;
    }
#pragma unroll
    for (int c = 0; c < KC; ++c) {
      uint4 kr;
      if constexpr (kSwizzled)
        kr = krow[(tq + 4 * c) ^ sw];
      else
        kr = krow[4 * c];
      const unsigned a0[4] = {qh[c][0], 0u, qh[c][1], 0u};
      const unsigned a1[4] = {qh[c][2], 0u, qh[c][3], 0u};
      const unsigned l0[4] = {ql[c][0], 0u, ql[c][1], 0u};
      const unsigned l1[4] = {ql[c][2], 0u, ql[c][3], 0u};
      mma_16816(sc[blk], a0, kr.x, kr.y, T{});
      mma_16816(sc[blk], l0, kr.x, kr.y, T{});
      mma_16816(sc[blk], a1, kr.z, kr.w, T{});
      mma_16816(sc[blk], l1, kr.z, kr.w, T{});
    }
  }
  float s[4] = {sc[0][0], sc[0][1], sc[1][0], sc[1][1]};
  const int key[4] = {k0 + 2 * tq, k0 + 2 * tq + 1, k0 + 8 + 2 * tq, k0 + 9 + 2 * tq};
  float mx = -INFINITY;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if (key[e] >= end) s[e] = -INFINITY;
    mx = fmaxf(mx, s[e]);
  }
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const float m_new = fmaxf(m, mx);
  const float corr = expf(m - m_new);
  m = m_new;
  float p[4];
  l *= corr;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    p[e] = expf(s[e] - m_new);
    l += p[e];
  }
  float r[4];
  const unsigned ph0 = pack2<T>(p[0], p[1], r[0], r[1]);
  const unsigned ph1 = pack2<T>(p[2], p[3], r[2], r[3]);
  const unsigned pl0 = pack2<T>(r[0], r[1]), pl1 = pack2<T>(r[2], r[3]);
  // The accumulator's columns are heads 2tq and 2tq + 1: their rescale factors.
  const float ca = __shfl_sync(0xffffffffu, corr, 8 * tq);
  const float cb = __shfl_sync(0xffffffffu, corr, 8 * tq + 4);
  // V of keys 2tq, 2tq + 1, 8 + 2tq, 9 + 2tq, elements [g * D/8, (g + 1) * D/8), 16
  // bytes (four row tiles of O^T) at a time.
#pragma unroll
  for (int c = 0; c < VW / 4; ++c) {
    uint4 v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int rr = i0 + (e >> 1) * 8 + 2 * tq + (e & 1);
      if constexpr (kSwizzled)
        v[e] = vs[rr * L + ((g * (L / 8) + c) ^ tile_swizzle(rr))];
      else
        v[e] = vs[rr * L + g * (L / 8) + c];
    }
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const int i = 4 * c + w;
      auto word = [&](const uint4& x) { return w == 0 ? x.x : w == 1 ? x.y : w == 2 ? x.z : x.w; };
      acc[i][0] *= ca;
      acc[i][1] *= cb;
      acc[i][2] *= ca;
      acc[i][3] *= cb;
      const unsigned av[4] = {
          __byte_perm(word(v[0]), word(v[1]), 0x5410), __byte_perm(word(v[0]), word(v[1]), 0x7632),
          __byte_perm(word(v[2]), word(v[3]), 0x5410), __byte_perm(word(v[2]), word(v[3]), 0x7632)};
      mma_16816(acc[i], av, ph0, ph1, T{});
      mma_16816(acc[i], av, pl0, pl1, T{});
    }
  }
}

}  // namespace weft::cuda::detail
