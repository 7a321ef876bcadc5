#include <mma.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_attention_pipelined.hpp"
#include "kernels/cuda/decode_attention_stream.hpp"
#include "kernels/cuda/decode_prologue.cuh"
#include "kernels/cuda/decode_tile.cuh"
#include "kernels/cuda/kv_element.cuh"
#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/tree_slots.cuh"

namespace weft::cuda {
namespace {

using detail::clear_split;
using detail::cp_async16;
using detail::cp_async_commit;
using detail::cp_async_wait;
using detail::first_position;
using detail::key_offset;
using detail::load_query;
using detail::mma_16816;
using detail::pack2;
using detail::patch_own_row;
using detail::query_fragments;
using detail::rope_own_kv;
using detail::split_positions;
using detail::tile_attend16;

constexpr int kDecodeThreads = 128;  // also the tile of positions one pass scores
constexpr int kKeyTile = 32;         // prefill: keys per tile
constexpr int kPrefillThreads = 128;
constexpr int kMaxHeadDim = 256;
constexpr int kMaxGroupInRegisters = 8;  // query heads per kv head scored from registers

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

// One tile of the decode kernels' online softmax, a warp per query head: turns head g's
// `n` scores (row g of `scores`, `tile` wide) into exp(score - running max) in place, and
// updates its running max m, sum l and the factor `corr` that rescales what was summed.
__device__ __forceinline__ void online_softmax_tile(float* scores, int tile, int n, int heads,
                                                    float* m_s, float* l_s, float* corr_s) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int g = warp; g < heads; g += warps) {
    float* sg = scores + g * tile;
    float tile_max = -FLT_MAX;
    for (int i = lane; i < n; i += 32)
      tile_max = fmaxf(tile_max, sg[i]);
    tile_max = detail::warp_max(tile_max);
    const float m_old = m_s[g];
    const float m_new = fmaxf(m_old, tile_max);
    float sum = 0.0f;
    for (int i = lane; i < n; i += 32) {
      const float p = expf(sg[i] - m_new);
      sg[i] = p;
      sum += p;
    }
    sum = detail::warp_sum(sum);
    if (lane == 0) {
      const float c = expf(m_old - m_new);
      corr_s[g] = c;
      l_s[g] = l_s[g] * c + sum;
      m_s[g] = m_new;
    }
  }
}

// Dynamic shared memory: q [G][D], scores [G][kDecodeThreads], acc [G][D], then per head
// m, l and the rescale factor [G] each, and value-row offsets [kDecodeThreads]. KV is the
// page element type: T, or int8/fp8 with a scale per row (a key's scales its scores, a value's
// its softmax weights once they are summed).
template <class T, class KV>
__global__ void decode_kernel(AttentionArgs a, FlatBatchView b, PagedKvView kv,
                              const std::int32_t* query_tokens, float* workspace) {
  extern __shared__ float smem[];
  detail::grid_dependency_wait();
  const int D = kv.head_dim, G = a.num_heads / kv.num_kv_heads, TILE = kDecodeThreads;
  float* q_s = smem;
  float* scores = q_s + G * D;
  float* acc = scores + G * TILE;
  float* m_s = acc + G * D;
  float* l_s = m_s + G;
  float* corr_s = l_s + G;
  auto* v_off = reinterpret_cast<std::size_t*>(corr_s + G + (G & 1));  // 8-byte aligned

  const DecodeSpan span = decode_span(a, b, query_tokens);
  const int t = span.t, pos = span.pos, begin = span.begin, end = span.end;
  if (begin > pos) return;  // this token's context has fewer splits than the grid
  const int kvh = blockIdx.x, split = blockIdx.z, splits = gridDim.z;
  const SlotTable table = slot_table(b, t);  // tree nodes: their path's slots
  const KV* pool = static_cast<const KV*>(kv.pool);
  const std::size_t v_shift = static_cast<std::size_t>(kv.num_kv_heads) * kv.page_size * D;

  const float* q =
      a.q + static_cast<std::size_t>(t) * a.q_stride + static_cast<std::size_t>(kvh) * G * D;
  for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
    q_s[i] = q[i] * a.scale;
    acc[i] = 0.0f;
  }
  for (int g = threadIdx.x; g < G; g += blockDim.x) {
    m_s[g] = -FLT_MAX;
    l_s[g] = 0.0f;
  }
  __syncthreads();

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int base = begin; base < end; base += TILE) {
    const int n = min(TILE, end - base);
    if (threadIdx.x < n) v_off[threadIdx.x] = key_offset(kv, table, base + threadIdx.x, kvh);
    __syncthreads();
    // Scores: a warp per key, lanes across head_dim (coalesced reads of the key row), every
    // head of the group from the one read.
    for (int i = warp; i < n; i += warps) {
      const KV* k = pool + v_off[i];
      const float ks = detail::kv_scaled<KV> ? row_scale(kv, table, base + i, kvh, false) : 1.0f;
      float s[kMaxGroupInRegisters];
      for (int g = 0; g < kMaxGroupInRegisters; ++g)
        s[g] = 0.0f;
      for (int d = lane; d < D; d += 32) {
        const float kd = detail::kv_to_float(k[d]);
#pragma unroll
        for (int g = 0; g < kMaxGroupInRegisters; ++g)
          if (g < G) s[g] += q_s[g * D + d] * kd;
      }
      for (int g0 = kMaxGroupInRegisters; g0 < G; ++g0) {  // larger groups: one head at a time
        float extra = 0.0f;
        for (int d = lane; d < D; d += 32)
          extra += q_s[g0 * D + d] * detail::kv_to_float(k[d]);
        extra = detail::warp_sum(extra);
        if (lane == 0) scores[g0 * TILE + i] = detail::kv_scaled<KV> ? extra * ks : extra;
      }
#pragma unroll
      for (int g = 0; g < kMaxGroupInRegisters; ++g) {
        if (g < G) {
          const float total = detail::warp_sum(s[g]);
          if (lane == 0) scores[g * TILE + i] = detail::kv_scaled<KV> ? total * ks : total;
        }
      }
    }
    __syncthreads();
    if (threadIdx.x < n) v_off[threadIdx.x] += v_shift;
    __syncthreads();
    online_softmax_tile(scores, TILE, n, G, m_s, l_s, corr_s);
    __syncthreads();
    if constexpr (detail::kv_scaled<KV>) {
      // l has the weights' sum; the value rows' scales go into the weights from here on.
      if (threadIdx.x < n) {
        const float vs = row_scale(kv, table, base + threadIdx.x, kvh, true);
        for (int g = 0; g < G; ++g)
          scores[g * TILE + threadIdx.x] *= vs;
      }
      __syncthreads();
    }
    // acc = acc * correction + p V: a thread per output dimension, coalesced over V rows.
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
      for (int g = 0; g < G; ++g) {
        const float* pg = scores + g * TILE;
        float o = acc[g * D + d] * corr_s[g];
        for (int i = 0; i < n; ++i)
          o += pg[i] * detail::kv_to_float(pool[v_off[i] + d]);
        acc[g * D + d] = o;
      }
    }
    __syncthreads();
  }

  const int NH = a.num_heads;
  if (splits == 1) {
    T* out = static_cast<T*>(a.out) + static_cast<std::size_t>(t) * NH * D +
             static_cast<std::size_t>(kvh) * G * D;
    for (int i = threadIdx.x; i < G * D; i += blockDim.x)
      out[i] = detail::from_float<T>(acc[i] / l_s[i / D]);
    return;
  }
  // Partial results: [query][head][split] records of D accumulators, then m and l.
  for (int g = 0; g < G; ++g) {
    const int h = kvh * G + g;
    float* rec =
        workspace + ((static_cast<std::size_t>(blockIdx.y) * NH + h) * splits + split) * (D + 2);
    for (int d = threadIdx.x; d < D; d += blockDim.x)
      rec[d] = acc[g * D + d];
    if (threadIdx.x == 0) {
      rec[D] = m_s[g];
      rec[D + 1] = l_s[g];
    }
  }
}

// The decode kernel for head_dim in {32, 64, 128, 256} and up to 8 query heads per kv head.
// Each warp runs its own online softmax over its share of the split's keys, with nothing
// shared inside the block until the end:
// - a key row is read by L = D/8 consecutive lanes, 16 bytes (8 elements) each, so a warp
//   reads KW = 32/L keys per pass and keeps U passes' keys and values in flight (U*KW keys,
//   2U 16-byte loads per lane issued before any arithmetic);
// - each lane keeps q[g][its 8 dims] * scale for every head g of the group in registers, so
//   a key is read once for the whole group; a score is the sum over the key's L lanes
//   (log2 L shuffles), the pass's maximum one more shuffle per key lane group;
// - the value sums acc[g][its 8 dims] stay in registers (each lane group sums its own keys,
//   the groups are added once after the loop), as do the running max m and sum l;
// - warps take passes of U*KW keys in turn (warp w: passes w, w+4, ...); the four warps'
//   results are merged in shared memory in warp order, then written as the split's record
//   (or the output when the context is one split).
// Every sum runs in an order fixed by the token's context alone.
// KV is the page element type: T (16-byte loads), or int8/fp8 (8-byte loads) with a scale per
// row, applied to a key's score and folded into a value's softmax weight (not into l).
template <class T, class KV, int D, int GM>
__global__ void __launch_bounds__(kDecodeThreads)
    decode_kernel_warp(AttentionArgs a, FlatBatchView b, PagedKvView kv,
                       const std::int32_t* query_tokens, float* workspace) {
  constexpr int kVec = 8, L = D / kVec, KW = 32 / L, U = GM >= 8 ? 2 : 4, STEP = KW * U;
  using Vec = std::conditional_t<sizeof(KV) == 2, uint4, uint2>;  // kVec elements
  constexpr bool kScaled = detail::kv_scaled<KV>;
  detail::grid_dependency_wait();
  constexpr int kWarps = kDecodeThreads / 32;
  __shared__ float red_acc[kWarps][GM][D];
  __shared__ float red_m[kWarps][GM], red_l[kWarps][GM];

  const DecodeSpan span = decode_span(a, b, query_tokens);
  const int t = span.t, pos = span.pos, begin = span.begin, end = span.end;
  if (begin > pos) return;  // this token's context has fewer splits than the grid
  const int kvh = blockIdx.x, split = blockIdx.z, splits = gridDim.z;
  const SlotTable table = slot_table(b, t);  // tree nodes: their path's slots
  const int G = a.num_heads / kv.num_kv_heads;
  const KV* pool = static_cast<const KV*>(kv.pool);
  const std::size_t v_shift = static_cast<std::size_t>(kv.num_kv_heads) * kv.page_size * D;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = lane % L, kq = lane / L;

  float q[GM][kVec], acc[GM][kVec], m[GM], l[GM];
  const float* qp = a.q + static_cast<std::size_t>(t) * a.q_stride +
                    static_cast<std::size_t>(kvh) * G * D + sub * kVec;
#pragma unroll
  for (int g = 0; g < GM; ++g) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      q[g][e] = g < G ? qp[g * D + e] * a.scale : 0.0f;
      acc[g][e] = 0.0f;
    }
    m[g] = -FLT_MAX;
    l[g] = 0.0f;
  }

  for (int base = begin + warp * STEP; base < end; base += kWarps * STEP) {
    Vec kr[U], vr[U];
    float ks[U], vs[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int p = base + u * KW + kq;
      kr[u] = vr[u] = Vec{};
      ks[u] = vs[u] = 0.0f;
      if (p < end) {
        const KV* row = pool + key_offset(kv, table, p, kvh) + sub * kVec;
        kr[u] = __ldg(reinterpret_cast<const Vec*>(row));
        vr[u] = __ldg(reinterpret_cast<const Vec*>(row + v_shift));
        if constexpr (kScaled) {
          ks[u] = row_scale(kv, table, p, kvh, false);
          vs[u] = row_scale(kv, table, p, kvh, true);
        }
      }
    }
    float s[U][GM];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const KV* k = reinterpret_cast<const KV*>(&kr[u]);
      float kf[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        kf[e] = detail::kv_to_float(k[e]);
#pragma unroll
      for (int g = 0; g < GM; ++g) {
        float x = 0.0f;
#pragma unroll
        for (int e = 0; e < kVec; ++e)
          x += q[g][e] * kf[e];
#pragma unroll
        for (int o = L / 2; o > 0; o >>= 1)
          x += __shfl_xor_sync(0xffffffffu, x, o);
        if constexpr (kScaled) x *= ks[u];
        s[u][g] = base + u * KW + kq < end ? x : -INFINITY;
      }
    }
#pragma unroll
    for (int g = 0; g < GM; ++g) {
      if (g < G) {
        float mx = s[0][g];
#pragma unroll
        for (int u = 1; u < U; ++u)
          mx = fmaxf(mx, s[u][g]);
#pragma unroll
        for (int o = L; o < 32; o <<= 1)
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        const float m_new = fmaxf(m[g], mx);
        const float c = expf(m[g] - m_new);
        m[g] = m_new;
        l[g] *= c;
#pragma unroll
        for (int e = 0; e < kVec; ++e)
          acc[g][e] *= c;
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const float pu = expf(s[u][g] - m_new);
          l[g] += pu;
          const float pv = kScaled ? pu * vs[u] : pu;
          const KV* v = reinterpret_cast<const KV*>(&vr[u]);
#pragma unroll
          for (int e = 0; e < kVec; ++e)
            acc[g][e] += pv * detail::kv_to_float(v[e]);
        }
      }
    }
  }

  // Add the key lane groups of the warp (m is the same on every lane), then merge the warps.
#pragma unroll
  for (int g = 0; g < GM; ++g) {
    if (g < G) {
#pragma unroll
      for (int o = L; o < 32; o <<= 1) {
        l[g] += __shfl_xor_sync(0xffffffffu, l[g], o);
#pragma unroll
        for (int e = 0; e < kVec; ++e)
          acc[g][e] += __shfl_xor_sync(0xffffffffu, acc[g][e], o);
      }
      if (kq == 0) {
#pragma unroll
        for (int e = 0; e < kVec; ++e)
          red_acc[warp][g][sub * kVec + e] = acc[g][e];
      }
      if (lane == 0) {
        red_m[warp][g] = m[g];
        red_l[warp][g] = l[g];
      }
    }
  }
  __syncthreads();
  const int NH = a.num_heads;
  for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
    const int g = i / D, d = i % D;
    float mm = red_m[0][g];
#pragma unroll
    for (int w = 1; w < kWarps; ++w)
      mm = fmaxf(mm, red_m[w][g]);
    float o = 0.0f, ll = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float f = expf(red_m[w][g] - mm);
      o += red_acc[w][g][d] * f;
      ll += red_l[w][g] * f;
    }
    if (splits == 1) {
      T* out = static_cast<T*>(a.out) + static_cast<std::size_t>(t) * NH * D +
               static_cast<std::size_t>(kvh) * G * D;
      out[i] = detail::from_float<T>(o / ll);
    } else {
      const int h = kvh * G + g;
      float* rec =
          workspace + ((static_cast<std::size_t>(blockIdx.y) * NH + h) * splits + split) * (D + 2);
      rec[d] = o;
      if (d == 0) {
        rec[D] = mm;
        rec[D + 1] = ll;
      }
    }
  }
}

// Keys per shared-memory tile of the tensor-core decode kernel (16 per warp).
constexpr int kStageKeys = 64;

// Tensor-core decode, one block per (query token, kv head, split) as the other decode
// kernels. The block copies tiles of kStageKeys keys and values into shared memory with
// cp.async (16 bytes per instruction, nothing held in registers while in flight; two tiles
// in turn when a split has more than one), each warp takes 16 keys of the tile with its own
// online softmax, and the four warps are merged in warp order at the end. The products run
// on mma.sync m16n8k16 (16-bit inputs, fp32 accumulators). Per warp and 16 keys:
// - S = Q K^T for the group's heads (rows; up to 8 of the 16 used) and 8 keys at a time:
//   lane (g = lane/4, t = lane%4) takes key g's 16 bytes at elements 32c + 8t of chunk c as
//   its B fragments, and head g's q at the same elements as its A fragments (head_dim
//   slots are permuted the same way on both sides, so the dot products are unchanged);
// - q*scale and the softmax weights p are split into a 16-bit high part and a 16-bit
//   remainder, each multiplied in turn, so the products carry ~16 bits more than one
//   rounding: the result matches fp32 arithmetic within the fp32 accumulators' rounding;
// - O^T += V^T P^T (rows: head_dim, columns: heads): the S fragment a lane holds (head g,
//   keys 2t, 2t+1) is already its B fragment; lane g reads head_dim elements
//   [g*D/8, (g+1)*D/8) of its four keys and packs pairs of keys with byte permutes.
// Every sum runs in an order fixed by the token's context alone.
template <class T, int D>
__global__ void __launch_bounds__(kDecodeThreads, D >= 256   ? 1
                                                  : D >= 128 ? 4
                                                             : 6)
    decode_kernel_tc(AttentionArgs a, FlatBatchView b, PagedKvView kv,
                     const std::int32_t* query_tokens, float* workspace, int stages) {
  detail::grid_dependency_wait();
  constexpr int kVec = 8, L = D / kVec;  // 16-byte chunks per row
  constexpr int kWarps = kDecodeThreads / 32, TP = kStageKeys, kWarpKeys = TP / kWarps;
  constexpr int KC = D / 32;  // k chunks of 32 elements (two m16n8k16 steps each)
  constexpr int VW = D / 16;  // 32-bit words of V per lane and key (= O^T row tiles)
  static_assert(kWarpKeys == 16, "one 16-key PV product per warp and tile");
  constexpr int GM = 8;
  extern __shared__ __align__(16) unsigned char staged_smem[];
  uint4* kv_s = reinterpret_cast<uint4*>(staged_smem);  // [stage][K|V][TP][L]

  const DecodeSpan span = decode_span(a, b, query_tokens);
  const int t = span.t, pos = span.pos, begin = span.begin, end = span.end;
  if (begin > pos) return;  // this token's context has fewer splits than the grid
  const int kvh = blockIdx.x, split = blockIdx.z, splits = gridDim.z;
  const SlotTable table = slot_table(b, t);  // tree nodes: their path's slots
  const int G = a.num_heads / kv.num_kv_heads;
  const T* pool = static_cast<const T*>(kv.pool);
  const std::size_t v_shift = static_cast<std::size_t>(kv.num_kv_heads) * kv.page_size * D;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, tq = lane & 3;

  // Row offsets of the tile being copied, computed once per row (page table, division).
  __shared__ std::size_t row_off[TP];
  auto issue = [&](int tb, int stage) {
    __syncthreads();  // row_off may still be read by the previous copy
    if (threadIdx.x < TP) {
      const int p = tb + threadIdx.x;
      row_off[threadIdx.x] = p < end ? key_offset(kv, table, p, kvh) : 0;
    }
    __syncthreads();
    uint4* ks = kv_s + static_cast<std::size_t>(stage) * 2 * TP * L;
    uint4* vs = ks + TP * L;
#pragma unroll
    for (int c = threadIdx.x; c < TP * L; c += kDecodeThreads) {
      const int i = c / L, part = c % L;
      const bool live = tb + i < end;
      const T* row = pool + row_off[i] + part * kVec;
      cp_async16(ks + c, row, live);
      cp_async16(vs + c, row + v_shift, live);
    }
    cp_async_commit();
  };
  issue(begin, 0);

  // Head g's q (loads in flight before the rotary embedding's barrier).
  float x[KC][8];
  load_query<D>(x, a, t, kvh, G, g, tq);

  // With a.rope_inv_freq, rope_store_kv's work for this token: q is rotated below, and the
  // block whose split ends at the token's own position rotates its key, rounds key and value
  // to T and stores them into the page slot now; they replace that row of the staged tile
  // once the tile has landed (the copy may have read the slot before the store). The rotary
  // table is made while the tile is in flight.
  const bool rope = a.rope_inv_freq != nullptr;
  const bool own_kv = rope && end == pos + 1;
  __shared__ float rope_c[D / 2], rope_s[D / 2];
  uint4 own[2] = {};
  rope_own_kv<T, D, kDecodeThreads>(a, b, kv, table, t, pos, kvh, rope, own_kv, rope_c, rope_s,
                                    own);

  // A fragments of q * scale (head g; rows 8-15 are zero), high parts and remainders.
  unsigned qh[KC][4], ql[KC][4];
  query_fragments<T>(x, rope && g < G, tq, rope_c, rope_s, a.scale, qh, ql);

  float acc[VW][4], m, l;  // head g's running max and this lane's part of its sum
  clear_split(acc, m, l);

  const int tiles = (end - begin + TP - 1) / TP;
  for (int j = 0; j < tiles; ++j) {
    const int stage = stages > 1 ? j & 1 : 0;
    if (stages > 1 && j + 1 < tiles) {
      issue(begin + (j + 1) * TP, (j + 1) & 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const uint4* ks = kv_s + static_cast<std::size_t>(stage) * 2 * TP * L;
    const uint4* vs = ks + TP * L;
    if (own_kv && pos - begin - j * TP < TP) {  // the tile holding the token's own key
      patch_own_row<L, TP>(kv_s + static_cast<std::size_t>(stage) * 2 * TP * L +
                               static_cast<std::size_t>(pos - begin - j * TP) * L,
                           0, own);
      __syncthreads();
    }
    const int i0 = warp * kWarpKeys, k0 = begin + j * TP + i0;
    if (k0 < end) {
      tile_attend16<T, L, false>(ks, vs, i0, k0, end, g, tq, qh, ql, m, l, acc);
    }
    __syncthreads();  // the stage is refilled next
    if (stages == 1 && j + 1 < tiles) issue(begin + (j + 1) * TP, 0);
  }

  // The warp's sums per head: l over the lanes of head g; then merge the warps in order.
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  float* red_acc = reinterpret_cast<float*>(staged_smem);  // [kWarps][GM][D]
  float* red_m = red_acc + kWarps * GM * D;                // [kWarps][GM]
  float* red_l = red_m + kWarps * GM;
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
    red_m[warp * GM + g] = m;
    red_l[warp * GM + g] = l;
  }
  __syncthreads();
  // Per head: the block's max, each warp's factor e^(m_w - M) and the block's sum.
  __shared__ float fac[kWarps][GM], blk_m[GM], blk_l[GM];
  if (threadIdx.x < G) {
    const int h = threadIdx.x;
    float mm = red_m[h];
    for (int w = 1; w < kWarps; ++w)
      mm = fmaxf(mm, red_m[w * GM + h]);
    float ll = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const float f = expf(red_m[w * GM + h] - mm);
      fac[w][h] = f;
      ll += red_l[w * GM + h] * f;
    }
    blk_m[h] = mm;
    blk_l[h] = ll;
  }
  __syncthreads();
  const int NH = a.num_heads;
  T* out = static_cast<T*>(a.out) + static_cast<std::size_t>(t) * NH * D +
           static_cast<std::size_t>(kvh) * G * D;
  // Split records: [query][head][split] of D accumulators, then m and l.
  float* recs =
      workspace + (static_cast<std::size_t>(blockIdx.y) * NH + kvh * G) * splits * (D + 2);
  for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
    const int h = i / D, d = i % D;
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w)
      o += red_acc[(w * GM + h) * D + d] * fac[w][h];
    if (splits == 1) {
      out[i] = detail::from_float<T>(o / blk_l[h]);
    } else {
      float* rec = recs + (static_cast<std::size_t>(h) * splits + split) * (D + 2);
      rec[d] = o;
      if (d == 0) {
        rec[D] = blk_m[h];
        rec[D + 1] = blk_l[h];
      }
    }
  }
}

using TcKernel = void (*)(AttentionArgs, FlatBatchView, PagedKvView, const std::int32_t*, float*,
                          int);

// The tensor-core kernel for (D, G), or nullptr.
template <class T>
TcKernel decode_tc_kernel(int D, int G) {
  if (G > kMaxGroupInRegisters) return nullptr;
  switch (D) {
    case 64:
      return decode_kernel_tc<T, 64>;
    case 128:
      return decode_kernel_tc<T, 128>;
    case 256:
      return decode_kernel_tc<T, 256>;
    default:
      return nullptr;
  }
}

// Shared memory of the tensor-core kernel: the tiles, or the merge records if larger.
std::size_t tc_shared_bytes(int D, int stages) {
  constexpr int GM = kMaxGroupInRegisters;
  const std::size_t tiles = static_cast<std::size_t>(stages) * 2 * kStageKeys * D * kHalfBytes;
  const std::size_t merge = sizeof(float) * (kDecodeThreads / 32) * GM * (D + 2);
  return std::max(tiles, merge);
}

using DecodeKernel = void (*)(AttentionArgs, FlatBatchView, PagedKvView, const std::int32_t*,
                              float*);

template <class T, class KV, int D>
DecodeKernel decode_warp_for_group(int G) {
  if (G <= 1) return decode_kernel_warp<T, KV, D, 1>;
  if (G <= 2) return decode_kernel_warp<T, KV, D, 2>;
  if (G <= 4) return decode_kernel_warp<T, KV, D, 4>;
  return decode_kernel_warp<T, KV, D, 8>;
}

// The warp kernel for (D, G), or nullptr where the scalar decode_kernel runs. With 16-bit
// pages head dims 64, 128 and 256 take the tensor-core kernel and the warp kernel serves
// head_dim 32; int8/fp8 pages take the warp kernel for all four (the tensor-core kernel reads
// 16-bit tiles only).
template <class T, class KV>
DecodeKernel decode_warp_kernel(int D, int G) {
  if (G > kMaxGroupInRegisters) return nullptr;
  if constexpr (detail::kv_scaled<KV>) {
    switch (D) {
      case 32:
        return decode_warp_for_group<T, KV, 32>(G);
      case 64:
        return decode_warp_for_group<T, KV, 64>(G);
      case 128:
        return decode_warp_for_group<T, KV, 128>(G);
      case 256:
        return decode_warp_for_group<T, KV, 256>(G);
      default:
        return nullptr;
    }
  }
  if (D != 32) return nullptr;
  return decode_warp_for_group<T, KV, 32>(G);
}

// Combines a token's splits: out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M), the
// factors e^(m_s - M) computed once per split.
template <class T>
__global__ void combine_kernel(AttentionArgs a, FlatBatchView b, int head_dim,
                               const std::int32_t* query_tokens, const float* workspace,
                               int splits) {
  __shared__ float f[kMaxDecodeSplits];
  detail::grid_dependency_wait();
  __shared__ float total;
  const int h = blockIdx.x, qi = blockIdx.y, D = head_dim;
  const int t = query_tokens[qi];
  const int pos = b.positions[t];
  const int span = pos + 1 - first_position(pos, a.sliding_window);
  const int chunk = split_positions(span);
  const int used = (span + chunk - 1) / chunk;
  const float* recs =
      workspace + (static_cast<std::size_t>(qi) * a.num_heads + h) * splits * (D + 2);
  if (threadIdx.x < 32) {
    const int s = threadIdx.x;
    const float ms = s < used ? recs[s * (D + 2) + D] : -FLT_MAX;
    const float m = detail::warp_max(ms);
    const float fs = s < used ? expf(ms - m) : 0.0f;
    if (s < used) f[s] = fs;
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // the sum in split order
    float l = 0.0f;
    for (int k = 0; k < used; ++k)
      l += recs[k * (D + 2) + D + 1] * f[k];
    total = l;
  }
  __syncthreads();
  T* out = static_cast<T*>(a.out) + static_cast<std::size_t>(t) * a.num_heads * D +
           static_cast<std::size_t>(h) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < used; ++s)
      o += recs[s * (D + 2) + d] * f[s];
    out[d] = detail::from_float<T>(o / total);
  }
}

// Dynamic shared memory: q [Q][D] fp32, k and v [kKeyTile][D] in T, p [Q][kKeyTile + 1],
// then per row m, l, rescale [Q] and the rows' positions [Q]. KV is the page element type:
// T, or int8/fp8 rows widened times their scale into the T tiles.
template <class T, class KV>
__global__ void prefill_kernel(AttentionArgs a, FlatBatchView b, PagedKvView kv,
                               const PrefillTile* tiles) {
  extern __shared__ float smem[];
  constexpr int Q = kPrefillTileQueries, K = kKeyTile, P = kKeyTile + 1;
  constexpr int kCols = kMaxHeadDim / kPrefillThreads;  // output columns per thread
  const int D = kv.head_dim;
  const PrefillTile tile = tiles[blockIdx.x];
  const int h = blockIdx.y, G = a.num_heads / kv.num_kv_heads, kvh = h / G;
  float* q_s = smem;
  T* k_s = reinterpret_cast<T*>(q_s + Q * D);
  T* v_s = k_s + K * D;
  float* p_s = reinterpret_cast<float*>(v_s + K * D);
  float* m_s = p_s + Q * P;
  float* l_s = m_s + Q;
  float* corr_s = l_s + Q;
  int* pos_s = reinterpret_cast<int*>(corr_s + Q);

  const int seq = b.token_seq[tile.first_token];
  const std::int32_t* table = b.page_ids + b.page_table_begin[seq];
  const KV* pool = static_cast<const KV*>(kv.pool);
  const std::size_t v_shift = static_cast<std::size_t>(kv.num_kv_heads) * kv.page_size * D;

  for (int i = threadIdx.x; i < Q * D; i += blockDim.x) {
    const int r = i / D, d = i % D;
    q_s[i] = r < tile.count ? a.q[static_cast<std::size_t>(tile.first_token + r) * a.q_stride +
                                  static_cast<std::size_t>(h) * D + d] *
                                  a.scale
                            : 0.0f;
  }
  for (int r = threadIdx.x; r < Q; r += blockDim.x) {
    pos_s[r] = r < tile.count ? b.positions[tile.first_token + r] : -1;
    m_s[r] = -FLT_MAX;
    l_s[r] = 0.0f;
  }
  __syncthreads();
  int lo, hi;
  tile_key_range(pos_s, tile.count, a.sliding_window, lo, hi);

  float acc[Q][kCols];
  for (int r = 0; r < Q; ++r)
    for (int c = 0; c < kCols; ++c)
      acc[r][c] = 0.0f;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int base = lo; base <= hi; base += K) {
    const int n = min(K, hi + 1 - base);
    for (int i = threadIdx.x; i < K * D; i += blockDim.x) {
      const int j = i / D, d = i % D;
      // K is stored transposed ([d][key]) so the score loop's lanes, which differ in key,
      // read consecutive addresses instead of one bank 32 times.
      if (j < n) {
        const std::size_t off = key_offset(kv, table, base + j, kvh);
        if constexpr (detail::kv_scaled<KV>) {
          const float ks = row_scale(kv, table, base + j, kvh, false);
          const float vs = row_scale(kv, table, base + j, kvh, true);
          k_s[d * K + j] = detail::from_float<T>(detail::kv_to_float(pool[off + d]) * ks);
          v_s[i] = detail::from_float<T>(detail::kv_to_float(pool[off + v_shift + d]) * vs);
        } else {
          k_s[d * K + j] = pool[off + d];
          v_s[i] = pool[off + v_shift + d];
        }
      } else {
        k_s[d * K + j] = detail::from_float<T>(0.0f);
        v_s[i] = detail::from_float<T>(0.0f);
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < Q * K; i += blockDim.x) {
      const int r = i / K, j = i % K;
      const int p = base + j, pos = pos_s[r];
      float s = -INFINITY;
      if (r < tile.count && j < n && p <= pos && p >= first_position(pos, a.sliding_window)) {
        s = 0.0f;
        for (int d = 0; d < D; ++d)
          s += q_s[r * D + d] * detail::to_float(k_s[d * K + j]);
      }
      p_s[r * P + j] = s;
    }
    __syncthreads();
    // Online softmax, a warp per row and a lane per key (kKeyTile is the warp size).
    for (int r = warp; r < Q; r += warps) {
      const float s = p_s[r * P + lane];
      const float tile_max = detail::warp_max(s);
      const float m_old = m_s[r];
      const float m_new = fmaxf(m_old, tile_max);
      const float p = s == -INFINITY ? 0.0f : expf(s - m_new);
      p_s[r * P + lane] = p;
      const float sum = detail::warp_sum(p);
      if (lane == 0) {
        const float c = expf(m_old - m_new);
        corr_s[r] = c;
        l_s[r] = l_s[r] * c + sum;
        m_s[r] = m_new;
      }
    }
    __syncthreads();
    for (int c = 0; c < kCols; ++c) {
      const int d = threadIdx.x + c * kPrefillThreads;
      if (d >= D) break;
      for (int r = 0; r < Q; ++r)
        acc[r][c] *= corr_s[r];
      for (int j = 0; j < n; ++j) {
        const float v = detail::to_float(v_s[j * D + d]);
        for (int r = 0; r < Q; ++r)
          acc[r][c] += p_s[r * P + j] * v;
      }
    }
    __syncthreads();
  }
  for (int c = 0; c < kCols; ++c) {
    const int d = threadIdx.x + c * kPrefillThreads;
    if (d >= D) break;
    for (int r = 0; r < tile.count; ++r) {
      T* out = static_cast<T*>(a.out) +
               static_cast<std::size_t>(tile.first_token + r) * a.num_heads * D +
               static_cast<std::size_t>(h) * D;
      out[d] = detail::from_float<T>(acc[r][c] / l_s[r]);
    }
  }
}

// Tensor-core prefill: 64 query rows of one sequence and one head per block, 4 warps of 16
// rows each; keys in tiles of 64. S = Q K^T and O += P V are WMMA products; the online
// softmax runs on S in shared memory, and O lives in shared memory (fp32) so its rows can be
// rescaled between tiles (WMMA accumulators have no row layout to scale in registers).
constexpr int kTcRows = 64, kTcKeys = 64, kTcThreads = 128;

struct TcLayout {
  int ldq, ldk, lds, ldp, ldo;                 // leading dimensions, padded against bank conflicts
  std::size_t q, k, v, s, p, o, stats, bytes;  // byte offsets into shared memory
};

__host__ __device__ inline TcLayout tc_layout(int D) {
  TcLayout L{};
  L.ldq = D + 8;
  L.ldk = D + 8;
  L.lds = kTcKeys + 4;
  L.ldp = kTcKeys + 8;
  L.ldo = D + 4;
  std::size_t at = 0;
  auto take = [&](std::size_t bytes) {
    const std::size_t start = at;
    at += (bytes + 31) / 32 * 32;  // 32-byte aligned, as WMMA loads require
    return start;
  };
  L.q = take(static_cast<std::size_t>(kTcRows) * L.ldq * 2);
  L.k = take(static_cast<std::size_t>(kTcKeys) * L.ldk * 2);
  L.v = take(static_cast<std::size_t>(kTcKeys) * L.ldk * 2);
  L.s = take(static_cast<std::size_t>(kTcRows) * L.lds * 4);
  L.p = take(static_cast<std::size_t>(kTcRows) * L.ldp * 2);
  L.o = take(static_cast<std::size_t>(kTcRows) * L.ldo * 4);
  L.stats = take(static_cast<std::size_t>(kTcRows) * 4 * 4);
  L.bytes = at;
  return L;
}

template <class T>
__global__ void prefill_kernel_tc(AttentionArgs a, FlatBatchView b, PagedKvView kv,
                                  const PrefillTile* tiles) {
  namespace wmma = nvcuda::wmma;
  extern __shared__ __align__(128) unsigned char tc_smem[];
  const int D = kv.head_dim;
  const TcLayout L = tc_layout(D);
  T* q_s = reinterpret_cast<T*>(tc_smem + L.q);
  T* k_s = reinterpret_cast<T*>(tc_smem + L.k);
  T* v_s = reinterpret_cast<T*>(tc_smem + L.v);
  float* s_s = reinterpret_cast<float*>(tc_smem + L.s);
  T* p_s = reinterpret_cast<T*>(tc_smem + L.p);
  float* o_s = reinterpret_cast<float*>(tc_smem + L.o);
  float* m_s = reinterpret_cast<float*>(tc_smem + L.stats);
  float* l_s = m_s + kTcRows;
  float* corr_s = l_s + kTcRows;
  int* pos_s = reinterpret_cast<int*>(corr_s + kTcRows);

  const PrefillTile tile = tiles[blockIdx.x];
  const int h = blockIdx.y, G = a.num_heads / kv.num_kv_heads, kvh = h / G;
  const int seq = b.token_seq[tile.first_token];
  const std::int32_t* table = b.page_ids + b.page_table_begin[seq];
  const T* pool = static_cast<const T*>(kv.pool);
  const std::size_t v_shift = static_cast<std::size_t>(kv.num_kv_heads) * kv.page_size * D;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  for (int i = threadIdx.x; i < kTcRows * D; i += blockDim.x) {
    const int r = i / D, d = i % D;
    const float x = r < tile.count
                        ? a.q[static_cast<std::size_t>(tile.first_token + r) * a.q_stride +
                              static_cast<std::size_t>(h) * D + d] *
                              a.scale
                        : 0.0f;
    q_s[r * L.ldq + d] = detail::from_float<T>(x);
    o_s[r * L.ldo + d] = 0.0f;
  }
  for (int r = threadIdx.x; r < kTcRows; r += blockDim.x) {
    pos_s[r] = r < tile.count ? b.positions[tile.first_token + r] : -1;
    m_s[r] = -FLT_MAX;
    l_s[r] = 0.0f;
  }
  __syncthreads();
  int lo, hi;
  tile_key_range(pos_s, tile.count, a.sliding_window, lo, hi);
  const int row0 = warp * 16;  // this warp's rows

  for (int base = lo; base <= hi; base += kTcKeys) {
    const int n = min(kTcKeys, hi + 1 - base);
    // K and V rows, 8 elements (16 bytes) per load; rows past n are zero.
    const int chunks = D / 8;
    for (int i = threadIdx.x; i < kTcKeys * chunks; i += blockDim.x) {
      const int j = i / chunks, c = i % chunks;
      uint4 kr = make_uint4(0, 0, 0, 0), vr = make_uint4(0, 0, 0, 0);
      if (j < n) {
        const std::size_t off = key_offset(kv, table, base + j, kvh) + c * 8;
        kr = *reinterpret_cast<const uint4*>(pool + off);
        vr = *reinterpret_cast<const uint4*>(pool + off + v_shift);
      }
      *reinterpret_cast<uint4*>(k_s + j * L.ldk + c * 8) = kr;
      *reinterpret_cast<uint4*>(v_s + j * L.ldk + c * 8) = vr;
    }
    __syncthreads();
    // S = Q K^T for this warp's 16 rows and the tile's 64 keys.
    for (int kb = 0; kb < kTcKeys / 16; ++kb) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
      wmma::fill_fragment(c, 0.0f);
      for (int d = 0; d < D; d += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> qa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> kb_frag;
        wmma::load_matrix_sync(qa, q_s + row0 * L.ldq + d, L.ldq);
        wmma::load_matrix_sync(kb_frag, k_s + kb * 16 * L.ldk + d, L.ldk);
        wmma::mma_sync(c, qa, kb_frag, c);
      }
      wmma::store_matrix_sync(s_s + row0 * L.lds + kb * 16, c, L.lds, wmma::mem_row_major);
    }
    __syncwarp();
    // Online softmax over the warp's rows; a lane takes keys lane and lane + 32.
    for (int r = row0; r < row0 + 16; ++r) {
      const int pos = pos_s[r];
      const int first = first_position(pos, a.sliding_window);
      float sv[2];
      float tile_max = -FLT_MAX;
      for (int k2 = 0; k2 < 2; ++k2) {
        const int j = lane + 32 * k2, p = base + j;
        const bool live = pos >= 0 && j < n && p <= pos && p >= first;
        sv[k2] = live ? s_s[r * L.lds + j] : -INFINITY;
        tile_max = fmaxf(tile_max, sv[k2]);
      }
      tile_max = detail::warp_max(tile_max);
      const float m_old = m_s[r];
      const float m_new = fmaxf(m_old, tile_max);
      float sum = 0.0f;
      for (int k2 = 0; k2 < 2; ++k2) {
        const float pr = sv[k2] == -INFINITY ? 0.0f : expf(sv[k2] - m_new);
        const T rounded = detail::from_float<T>(pr);
        p_s[r * L.ldp + lane + 32 * k2] = rounded;
        sum += detail::to_float(rounded);  // l sums what P V will multiply
      }
      sum = detail::warp_sum(sum);
      const float c = expf(m_old - m_new);
      if (lane == 0) {
        l_s[r] = l_s[r] * c + sum;
        m_s[r] = m_new;
      }
      for (int d = lane; d < D; d += 32)
        o_s[r * L.ldo + d] *= c;
    }
    __syncwarp();
    // O += P V for the warp's rows.
    for (int db = 0; db < D; db += 16) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> o;
      wmma::load_matrix_sync(o, o_s + row0 * L.ldo + db, L.ldo, wmma::mem_row_major);
      for (int kk = 0; kk < kTcKeys; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> pa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> vb;
        wmma::load_matrix_sync(pa, p_s + row0 * L.ldp + kk, L.ldp);
        wmma::load_matrix_sync(vb, v_s + kk * L.ldk + db, L.ldk);
        wmma::mma_sync(o, pa, vb, o);
      }
      wmma::store_matrix_sync(o_s + row0 * L.ldo + db, o, L.ldo, wmma::mem_row_major);
    }
    __syncthreads();  // K and V are reloaded next
  }
  for (int i = threadIdx.x; i < tile.count * D; i += blockDim.x) {
    const int r = i / D, d = i % D;
    T* out = static_cast<T*>(a.out) +
             static_cast<std::size_t>(tile.first_token + r) * a.num_heads * D +
             static_cast<std::size_t>(h) * D;
    out[d] = detail::from_float<T>(o_s[r * L.ldo + d] / l_s[r]);
  }
}

// FlashAttention-2-style prefill for head_dim 64 and 128: one block per (query head, tile of
// up to 64 query rows of one sequence), 4 warps of 16 rows, keys in tiles of 64 copied into
// shared memory with cp.async, the next tile in flight while this one is computed. Q (as
// q*scale rounded to 16 bits), S, P and O stay in registers: S = Q K^T and O += P V are
// mma.sync m16n8k16 products (K fragments by ldmatrix, V fragments by ldmatrix.trans), the
// S accumulators of two 8-key blocks are the A fragment of P for 16 keys, and the online
// softmax runs per row on a lane quad (shuffles). P is rounded to 16 bits and l sums the
// rounded values, as in the WMMA kernel. A warp skips key tiles past all of its rows'
// positions (they would contribute exactly nothing). The grid's fast dimension is the head,
// tiles in reverse order, so the longest causal tiles start first and the heads of a kv
// group read the same keys at about the same time (from L2).
constexpr int kMmaRows = 64, kMmaKeys = 64, kMmaThreads = 128;

template <int D, int S>
struct MmaPrefillLayout {
  static constexpr int ld = D + 8;  // elements per shared row: 16 bytes of padding
  static constexpr std::size_t tile = static_cast<std::size_t>(kMmaKeys) * ld * 2;
  static constexpr std::size_t bytes = 2 * S * tile + kMmaRows * sizeof(int);  // K, V x S stages
};

__device__ __forceinline__ void ldsm_x4(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3,
                                        const void* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_trans(unsigned& r0, unsigned& r1, unsigned& r2,
                                              unsigned& r3, const void* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(a));
}

template <class T>
__device__ __forceinline__ float2 unpack2(unsigned u) {
  T lo, hi;
  const unsigned short ul = static_cast<unsigned short>(u & 0xffffu),
                       uh = static_cast<unsigned short>(u >> 16);
  memcpy(&lo, &ul, 2);
  memcpy(&hi, &uh, 2);
  return make_float2(detail::to_float(lo), detail::to_float(hi));
}

template <class T, int D, int S>
__global__ void __launch_bounds__(kMmaThreads, 2)
    prefill_kernel_mma(AttentionArgs a, FlatBatchView b, PagedKvView kv, const PrefillTile* tiles) {
  using Lay = MmaPrefillLayout<D, S>;
  constexpr int ld = Lay::ld, KS = D / 16, NB = D / 8;
  extern __shared__ __align__(128) unsigned char mma_smem[];
  T* k_s = reinterpret_cast<T*>(mma_smem);  // [S][kMmaKeys][ld]
  T* v_s = reinterpret_cast<T*>(mma_smem + S * Lay::tile);
  int* pos_s = reinterpret_cast<int*>(mma_smem + 2 * S * Lay::tile);

  const PrefillTile tile = tiles[gridDim.y - 1 - blockIdx.y];
  const int h = blockIdx.x, G = a.num_heads / kv.num_kv_heads, kvh = h / G;
  const int seq = b.token_seq[tile.first_token];
  const std::int32_t* table = b.page_ids + b.page_table_begin[seq];
  const T* pool = static_cast<const T*>(kv.pool);
  const std::size_t v_shift = static_cast<std::size_t>(kv.num_kv_heads) * kv.page_size * D;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int window = a.sliding_window;

  for (int r = threadIdx.x; r < kMmaRows; r += blockDim.x)
    pos_s[r] = r < tile.count ? b.positions[tile.first_token + r] : -1;
  __syncthreads();
  int lo, hi;
  tile_key_range(pos_s, tile.count, window, lo, hi);
  const int row0 = warp * 16;
  const int pos0 = pos_s[row0 + g], pos1 = pos_s[row0 + g + 8];
  const int first0 = first_position(pos0, window), first1 = first_position(pos1, window);
  // The warp's key span: tiles outside it contribute nothing to its rows.
  int warp_hi = max(pos0, pos1),
      warp_lo = min(pos0 >= 0 ? first0 : INT_MAX, pos1 >= 0 ? first1 : INT_MAX);
  // Keys in [warp_max_first, warp_min_pos] are live for every row of the warp (a row past
  // the tile has position -1, so its warp always masks).
  int warp_min_pos = min(pos0, pos1), warp_max_first = max(first0, first1);
  for (int o = 16; o > 0; o >>= 1) {
    warp_hi = max(warp_hi, __shfl_xor_sync(0xffffffffu, warp_hi, o));
    warp_lo = min(warp_lo, __shfl_xor_sync(0xffffffffu, warp_lo, o));
    warp_min_pos = min(warp_min_pos, __shfl_xor_sync(0xffffffffu, warp_min_pos, o));
    warp_max_first = max(warp_max_first, __shfl_xor_sync(0xffffffffu, warp_max_first, o));
  }

  // Q fragments (A, row-major 16 x 16 per k step): rows g and g + 8, columns 2t, 2t + 1 and
  // 2t + 8, 2t + 9.
  unsigned qf[KS][4];
  {
    const float* q0 = a.q + static_cast<std::size_t>(tile.first_token + row0 + g) * a.q_stride +
                      static_cast<std::size_t>(h) * D;
    const float* q1 = q0 + 8 * a.q_stride;
    const bool l0 = row0 + g < tile.count, l1 = row0 + g + 8 < tile.count;
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      const int c = ks * 16 + 2 * t;
      const float2 x0 = l0 ? *reinterpret_cast<const float2*>(q0 + c) : make_float2(0.f, 0.f);
      const float2 x1 = l1 ? *reinterpret_cast<const float2*>(q1 + c) : make_float2(0.f, 0.f);
      const float2 x2 = l0 ? *reinterpret_cast<const float2*>(q0 + c + 8) : make_float2(0.f, 0.f);
      const float2 x3 = l1 ? *reinterpret_cast<const float2*>(q1 + c + 8) : make_float2(0.f, 0.f);
      qf[ks][0] = pack2<T>(x0.x * a.scale, x0.y * a.scale);
      qf[ks][1] = pack2<T>(x1.x * a.scale, x1.y * a.scale);
      qf[ks][2] = pack2<T>(x2.x * a.scale, x2.y * a.scale);
      qf[ks][3] = pack2<T>(x3.x * a.scale, x3.y * a.scale);
    }
  }

  float o[NB][4];
#pragma unroll
  for (int nb = 0; nb < NB; ++nb)
    o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.0f;
  float m0 = -FLT_MAX, m1 = -FLT_MAX, l0 = 0.0f, l1 = 0.0f;

  // Copies keys [base, base + n) of the kv head into stage `st`; rows past n are zero. A
  // thread takes one 16-byte column of every (kMmaThreads / chunks)-th row, walking the page
  // table instead of dividing per row.
  const int ps = kv.page_size;
  constexpr int chunks = D / 8, step = kMmaThreads / chunks;
  const int col = threadIdx.x % chunks, j0 = threadIdx.x / chunks;
  const std::size_t head_base = kv.layer_offset + static_cast<std::size_t>(kvh) * ps * D + col * 8;
  auto load = [&](int st, int base) {
    const int n = min(kMmaKeys, hi + 1 - base);
    int pi = (base + j0) / ps, slot = base + j0 - pi * ps;
#pragma unroll
    for (int k = 0; k < kMmaKeys / step; ++k) {
      const int j = j0 + k * step;
      const bool live = j < n;
      const std::size_t off = live ? static_cast<std::size_t>(table[pi]) * kv.page_elems +
                                         head_base + static_cast<std::size_t>(slot) * D
                                   : 0;
      cp_async16(k_s + (st * kMmaKeys + j) * ld + col * 8, pool + off, live);
      cp_async16(v_s + (st * kMmaKeys + j) * ld + col * 8, pool + off + (live ? v_shift : 0), live);
      slot += step;
      while (slot >= ps) {
        slot -= ps;
        ++pi;
      }
    }
  };

  // S stages: tiles up to S - 1 ahead are in flight (one commit group per tile, empty past hi).
  int next = lo;
  for (int st = 0; st < S - 1; ++st, next += kMmaKeys) {
    if (next <= hi) load(st, next);
    cp_async_commit();
  }
  int stage = 0;
  for (int base = lo; base <= hi; base += kMmaKeys, stage = stage + 1 == S ? 0 : stage + 1) {
    {
      const int st = stage + S - 1 >= S ? stage - 1 : stage + S - 1;  // (stage + S - 1) % S
      if (next <= hi) load(st, next);
      cp_async_commit();
      next += kMmaKeys;
    }
    cp_async_wait<S - 1>();
    __syncthreads();
    if (base <= warp_hi && base + kMmaKeys > warp_lo) {
      const T* kt = k_s + stage * kMmaKeys * ld;
      const T* vt = v_s + stage * kMmaKeys * ld;
      // S = Q K^T: 8 blocks of 8 keys.
      float s[kMmaKeys / 8][4];
#pragma unroll
      for (int j = 0; j < kMmaKeys / 8; ++j) {
        s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < KS; ks += 2) {
          unsigned b0, b1, b2, b3;
          ldsm_x4(b0, b1, b2, b3, kt + (j * 8 + (lane & 7)) * ld + ks * 16 + (lane >> 3) * 8);
          mma_16816(s[j], qf[ks], b0, b1, T{});
          mma_16816(s[j], qf[ks + 1], b2, b3, T{});
        }
      }
      // Online softmax on rows g (s[.][0..1]) and g + 8 (s[.][2..3]); masking only where some
      // key of the tile is outside some row's span.
      if (base + kMmaKeys - 1 > warp_min_pos || base < warp_max_first) {
#pragma unroll
        for (int j = 0; j < kMmaKeys / 8; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int p = base + j * 8 + 2 * t + e;
            const bool live0 = p <= pos0 && p >= first0 && pos0 >= 0;
            const bool live1 = p <= pos1 && p >= first1 && pos1 >= 0;
            s[j][e] = live0 ? s[j][e] : -INFINITY;
            s[j][2 + e] = live1 ? s[j][2 + e] : -INFINITY;
          }
        }
      }
      float mx0 = -FLT_MAX, mx1 = -FLT_MAX;
#pragma unroll
      for (int j = 0; j < kMmaKeys / 8; ++j) {
        mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
        mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
      }
#pragma unroll
      for (int o2 = 1; o2 < 4; o2 <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o2));
      }
      const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
      constexpr float kLog2e = 1.4426950408889634f;
      const float c0 = exp2f((m0 - mn0) * kLog2e), c1 = exp2f((m1 - mn1) * kLog2e);
      m0 = mn0;
      m1 = mn1;
      float sum0 = 0.0f, sum1 = 0.0f;
      unsigned pf[kMmaKeys / 16][4];
#pragma unroll
      for (int j = 0; j < kMmaKeys / 8; ++j) {
        // exp2 of -inf (a masked key) is 0; mn is finite.
        const float p0 = exp2f((s[j][0] - mn0) * kLog2e);
        const float p1 = exp2f((s[j][1] - mn0) * kLog2e);
        const float p2 = exp2f((s[j][2] - mn1) * kLog2e);
        const float p3 = exp2f((s[j][3] - mn1) * kLog2e);
        const unsigned u01 = pack2<T>(p0, p1), u23 = pack2<T>(p2, p3);
        const float2 r01 = unpack2<T>(u01), r23 = unpack2<T>(u23);
        sum0 += r01.x + r01.y;  // l sums what P V multiplies
        sum1 += r23.x + r23.y;
        pf[j / 2][(j & 1) * 2 + 0] = u01;
        pf[j / 2][(j & 1) * 2 + 1] = u23;
      }
#pragma unroll
      for (int o2 = 1; o2 < 4; o2 <<= 1) {
        sum0 += __shfl_xor_sync(0xffffffffu, sum0, o2);
        sum1 += __shfl_xor_sync(0xffffffffu, sum1, o2);
      }
      l0 = l0 * c0 + sum0;
      l1 = l1 * c1 + sum1;
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
        o[nb][0] *= c0;
        o[nb][1] *= c0;
        o[nb][2] *= c1;
        o[nb][3] *= c1;
      }
      // O += P V: for 16 keys at a time, V fragments of two 8-wide head_dim blocks per ldmatrix.
#pragma unroll
      for (int kk = 0; kk < kMmaKeys / 16; ++kk) {
#pragma unroll
        for (int nb = 0; nb < NB; nb += 2) {
          unsigned b0, b1, b2, b3;
          ldsm_x4_trans(
              b0, b1, b2, b3,
              vt + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + nb * 8 + (lane >> 4) * 8);
          mma_16816(o[nb], pf[kk], b0, b1, T{});
          mma_16816(o[nb + 1], pf[kk], b2, b3, T{});
        }
      }
    }
    __syncthreads();  // this stage is refilled next
  }
  const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
  const int r0 = row0 + g, r1 = row0 + g + 8;
  T* out0 = static_cast<T*>(a.out) +
            static_cast<std::size_t>(tile.first_token + r0) * a.num_heads * D +
            static_cast<std::size_t>(h) * D;
  T* out1 = out0 + static_cast<std::size_t>(8) * a.num_heads * D;
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
    const int d = nb * 8 + 2 * t;
    if (r0 < tile.count)
      *reinterpret_cast<unsigned*>(out0 + d) = pack2<T>(o[nb][0] * inv0, o[nb][1] * inv0);
    if (r1 < tile.count)
      *reinterpret_cast<unsigned*>(out1 + d) = pack2<T>(o[nb][2] * inv1, o[nb][3] * inv1);
  }
}

template <class T>
using MmaPrefillKernel = void (*)(AttentionArgs, FlatBatchView, PagedKvView, const PrefillTile*);

// Pipeline depth: 3 stages measured the same as 2 on the 8b shape (7.43 ms per 2048-token
// prefill either way), so 2, with less shared memory.
constexpr int kMmaStages = 2;

template <class T>
MmaPrefillKernel<T> prefill_mma_kernel(int D) {
  if (D == 64) return prefill_kernel_mma<T, 64, kMmaStages>;
  if (D == 128) return prefill_kernel_mma<T, 128, kMmaStages>;
  return nullptr;
}

std::size_t prefill_mma_shared(int D) {
  if (D == 64) return MmaPrefillLayout<64, kMmaStages>::bytes;
  if (D == 128) return MmaPrefillLayout<128, kMmaStages>::bytes;
  return 0;
}

bool tensor_core_prefill(int head_dim) {
  return head_dim % 16 == 0 && head_dim <= kMaxHeadDim;
}

// Grid depth: no token of context up to max_context needs more splits than this.
int decode_splits(int max_context) {
  return std::min(kMaxDecodeSplits, (max_context + kDecodeSplitQuantum - 1) / kDecodeSplitQuantum);
}

// Lets `kernel` use all the dynamic shared memory a block can opt into beside its static
// shared memory.
template <class K>
void allow_dynamic_shared_memory(K* kernel, int bytes) {
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       bytes - static_cast<int>(attr.sharedSizeBytes));
}

template <class T>
void allow_all_shared_memory(int bytes) {
  cudaFuncSetAttribute(decode_kernel<T, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  cudaFuncSetAttribute(prefill_kernel<T, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  for (auto* k : {decode_kernel<T, detail::KvInt8>, decode_kernel<T, detail::KvFp8>})
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  for (auto* k : {prefill_kernel<T, detail::KvInt8>, prefill_kernel<T, detail::KvFp8>})
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  for (int D : {64, 128, 256})
    allow_dynamic_shared_memory(decode_tc_kernel<T>(D, 8), bytes);
  cudaFuncSetAttribute(prefill_kernel_tc<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  for (int D : {64, 128})
    cudaFuncSetAttribute(prefill_mma_kernel<T>(D), cudaFuncAttributeMaxDynamicSharedMemorySize,
                         bytes);
}

}  // namespace

void prepare_attention_kernels() {
  // Once per process, outside any stream capture (the setting is not a stream operation):
  // every attention kernel may use all the shared memory a block can opt into.
  static const bool prepared = [] {
    int device = 0, bytes = 0;
    cudaGetDevice(&device);
    if (cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
            cudaSuccess ||
        bytes <= 0) {
      cudaGetLastError();
      return false;
    }
    allow_all_shared_memory<__nv_bfloat16>(bytes);
    allow_all_shared_memory<__half>(bytes);
    detail::prepare_decode_pipelined(bytes);
    detail::prepare_decode_stream(bytes);
    return true;
  }();
  (void)prepared;
}

bool decode_attention_applies_rope(int num_heads, int num_kv_heads, int head_dim, KvDtype dtype) {
  if (kv_dtype_scaled(dtype)) return false;  // the tensor-core kernel reads 16-bit pages
  if (num_kv_heads <= 0 || num_heads % num_kv_heads != 0) return false;
  return decode_tc_kernel<__nv_bfloat16>(head_dim, num_heads / num_kv_heads) != nullptr;
}

namespace {

// decode_attention_kernel(): -1 until read from WEFT_DECODE_ATTN.
std::atomic<int> g_decode_kernel{-1};

DecodeAttentionKernel decode_kernel_from_env() {
  const char* v = std::getenv("WEFT_DECODE_ATTN");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "stream") == 0)
    return DecodeAttentionKernel::kStream;
  if (std::strcmp(v, "old") == 0 || std::strcmp(v, "split") == 0)
    return DecodeAttentionKernel::kSplit;
  if (std::strcmp(v, "new") == 0 || std::strcmp(v, "pipelined") == 0)
    return DecodeAttentionKernel::kPipelined;
  std::fprintf(stderr, "weft: ignoring WEFT_DECODE_ATTN=%s (expected stream, old or new)\n", v);
  return DecodeAttentionKernel::kStream;
}

}  // namespace

DecodeAttentionKernel decode_attention_kernel() {
  int k = g_decode_kernel.load(std::memory_order_relaxed);
  if (k < 0) {
    int expected = -1;
    g_decode_kernel.compare_exchange_strong(expected, static_cast<int>(decode_kernel_from_env()));
    k = g_decode_kernel.load(std::memory_order_relaxed);
  }
  return static_cast<DecodeAttentionKernel>(k);
}

void set_decode_attention_kernel(DecodeAttentionKernel kernel) {
  g_decode_kernel.store(static_cast<int>(kernel), std::memory_order_relaxed);
}

const char* decode_attention_kernel_name(DecodeAttentionKernel kernel) {
  switch (kernel) {
    case DecodeAttentionKernel::kPipelined:
      return "new";
    case DecodeAttentionKernel::kStream:
      return "stream";
    default:
      return "old";
  }
}

int decode_split_count(int max_context) {
  // Each kernel's grid differs: a graph captured with one kernel is not another's.
  const int kernel = static_cast<int>(decode_attention_kernel());
  return decode_splits(max_context) + kernel * (kMaxDecodeSplits + 1);
}

std::size_t decode_workspace_floats(int queries, int num_heads, int head_dim, int max_context) {
  const int splits = decode_splits(max_context);
  if (splits == 1) return 0;
  return static_cast<std::size_t>(queries) * num_heads * splits * (head_dim + 2);
}

void decode_attention(const AttentionArgs& args, const FlatBatchView& batch, const PagedKvView& kv,
                      const std::int32_t* query_tokens, int num_queries, int max_context,
                      float* workspace, cudaStream_t stream) {
  if (num_queries == 0) return;
  prepare_attention_kernels();
  const int G = args.num_heads / kv.num_kv_heads, D = kv.head_dim;
  const int splits = decode_splits(max_context);
  const dim3 grid(kv.num_kv_heads, num_queries, splits);
  if (decode_attention_kernel() == DecodeAttentionKernel::kPipelined &&
      detail::decode_pipelined_supports(args.num_heads, kv.num_kv_heads, D, kv.dtype)) {
    detail::decode_attention_pipelined(args, batch, kv, query_tokens, num_queries, max_context,
                                       workspace, stream);
    return;
  }
  if (decode_attention_kernel() == DecodeAttentionKernel::kStream &&
      detail::decode_stream_supports(args.num_heads, kv.num_kv_heads, D, kv.dtype)) {
    detail::decode_attention_stream(args, batch, kv, query_tokens, num_queries, max_context,
                                    workspace, stream);
    return;
  }
  WEFT_DISPATCH_KV(kv, {
    TcKernel tc = detail::kv_scaled<KV> ? nullptr : decode_tc_kernel<T>(D, G);
    if (tc != nullptr) {
      // Two stages when some token's split spans more than one tile.
      const int chunk = splits > 1 ? split_positions(max_context) : max_context;
      const int stages = chunk > kStageKeys ? 2 : 1;
      detail::launch(tc, grid, kDecodeThreads, tc_shared_bytes(D, stages), stream, args, batch, kv,
                     query_tokens, workspace, stages);
    } else if (auto* warp_kernel = decode_warp_kernel<T, KV>(D, G)) {
      detail::launch(warp_kernel, grid, kDecodeThreads, 0, stream, args, batch, kv, query_tokens,
                     workspace);
    } else {
      const std::size_t shared = sizeof(float) * (2 * G * D + G * kDecodeThreads + 3 * G + 1) +
                                 sizeof(std::size_t) * kDecodeThreads + 8;
      detail::launch(decode_kernel<T, KV>, grid, kDecodeThreads, shared, stream, args, batch, kv,
                     query_tokens, workspace);
    }
    if (splits > 1) {
      detail::launch(combine_kernel<T>, dim3(args.num_heads, num_queries), 128, 0, stream, args,
                     batch, D, query_tokens, workspace, splits);
    }
  });
}

int prefill_tile_queries(int head_dim, KvDtype dtype) {
  if (kv_dtype_scaled(dtype)) return kPrefillTileQueries;  // the CUDA-core kernel
  return tensor_core_prefill(head_dim) ? kTcRows : kPrefillTileQueries;
}

void prefill_attention(const AttentionArgs& args, const FlatBatchView& batch, const PagedKvView& kv,
                       const PrefillTile* tiles, int num_tiles, cudaStream_t stream) {
  if (num_tiles == 0) return;
  prepare_attention_kernels();
  const int D = kv.head_dim;
  const dim3 grid(num_tiles, args.num_heads);
  // WEFT_PREFILL_ATTENTION=wmma keeps the WMMA kernel where the mma.sync one would run (for
  // comparisons).
  static const bool wmma_only = [] {
    const char* v = std::getenv("WEFT_PREFILL_ATTENTION");
    return v != nullptr && std::strcmp(v, "wmma") == 0;
  }();
  const bool quantized = kv_dtype_scaled(kv.dtype);
  const int mma_shared = static_cast<int>(prefill_mma_shared(D));
  if (mma_shared > 0 && !wmma_only && !quantized) {
    WEFT_DISPATCH_PRECISION(kv.precision, {
      prefill_mma_kernel<T>(
          D)<<<dim3(args.num_heads, num_tiles), kMmaThreads, mma_shared, stream>>>(args, batch, kv,
                                                                                   tiles);
    });
    return;
  }
  if (tensor_core_prefill(D) && !quantized) {
    const auto shared = static_cast<int>(tc_layout(D).bytes);
    WEFT_DISPATCH_PRECISION(kv.precision, {
      prefill_kernel_tc<T><<<grid, kTcThreads, shared, stream>>>(args, batch, kv, tiles);
    });
    return;
  }
  constexpr int Q = kPrefillTileQueries;
  const std::size_t shared = sizeof(float) * Q * D + 2 * kHalfBytes * kKeyTile * D +
                             sizeof(float) * (Q * (kKeyTile + 1) + 3 * Q) + sizeof(int) * Q;
  WEFT_DISPATCH_KV(kv, {
    prefill_kernel<T, KV><<<grid, kPrefillThreads, shared, stream>>>(args, batch, kv, tiles);
  });
}

}  // namespace weft::cuda
