// The FlashAttention-2-style prefill kernel on mma.sync (16-bit and int8/fp8 pages, head_dim 64
// and 128), which prefill_attention (prefill_attention.cu) runs where it can; the comment above
// the kernel describes it.

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_tile_quant.cuh"
#include "kernels/cuda/paged_attention.cuh"
#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/prefill_attention.hpp"

namespace weft::cuda {
namespace {

using detail::cp_async16;
using detail::cp_async_commit;
using detail::cp_async_wait;
using detail::first_position;
using detail::mma_16816;
using detail::pack2;
using detail::tile_key_range;

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
// One-byte pages (KV = KvInt8 or KvFp8): the stages hold the tiles' bytes and their rows'
// scales; once a stage lands the block converts it, exactly (decode_tile_quant.cuh's kv_pair),
// into one 16-bit K and V tile that the products read as above. K's scales multiply S's
// columns; V's scales (times kv_weight_boost, taken back out of l at the end) multiply P's
// before it is rounded, and l sums the weights unscaled.
constexpr int kMmaRows = 64, kMmaKeys = 64, kMmaThreads = 128;
static_assert(kMmaThreads == 2 * kMmaKeys, "a thread per K or V scale of a tile");

template <int D, int S>
struct MmaPrefillLayout {
  static constexpr int ld = D + 8;  // elements per shared row: 16 bytes of padding
  static constexpr std::size_t tile = static_cast<std::size_t>(kMmaKeys) * ld * 2;
  static constexpr std::size_t bytes = 2 * S * tile + kMmaRows * sizeof(int);  // K, V x S stages
};
// One-byte pages: one 16-bit K and V tile, then S stages of K bytes [kMmaKeys][D], V bytes and
// the K and V scales [kMmaKeys] each.
template <int D, int S>
struct MmaPrefillQuantLayout {
  static constexpr std::size_t tile = MmaPrefillLayout<D, S>::tile;
  static constexpr std::size_t stage = 2ull * kMmaKeys * D + 2 * kMmaKeys * sizeof(float);
  static constexpr std::size_t bytes = 2 * tile + S * stage + kMmaRows * sizeof(int);
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

template <class T, class KV, int D, int S>
__global__ void __launch_bounds__(kMmaThreads, 2)
    prefill_kernel_mma(AttentionArgs a, FlatBatchView b, PagedKvView kv, const PrefillTile* tiles) {
  using Lay = MmaPrefillLayout<D, S>;
  using QLay = MmaPrefillQuantLayout<D, S>;
  constexpr bool kQuant = detail::kv_scaled<KV>;
  constexpr int ld = Lay::ld, KS = D / 16, NB = D / 8;
  extern __shared__ __align__(128) unsigned char mma_smem[];
  T* k_s = reinterpret_cast<T*>(mma_smem);  // [S][kMmaKeys][ld] (one-byte pages: [1][..][..])
  T* v_s = reinterpret_cast<T*>(mma_smem + (kQuant ? 1 : S) * Lay::tile);
  unsigned char* q_st = mma_smem + 2 * Lay::tile;  // one-byte pages: the S stages
  int* pos_s = reinterpret_cast<int*>(
      mma_smem + (kQuant ? 2 * Lay::tile + S * QLay::stage : 2 * S * Lay::tile));

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
  // One-byte pages: the same walk over 16-byte columns of D bytes, and a thread per scale.
  constexpr int qchunks = D / 16, qstep = kMmaThreads / qchunks;
  const int qcol = threadIdx.x % qchunks, qj0 = threadIdx.x / qchunks;
  const unsigned char* bytes = static_cast<const unsigned char*>(kv.pool);
  auto load = [&](int st, int base) {
    if constexpr (kQuant) {
      unsigned char* ks = q_st + st * QLay::stage;
      unsigned char* vs = ks + kMmaKeys * D;
      float* scales = reinterpret_cast<float*>(vs + kMmaKeys * D);  // K's, then V's
      const int n = min(kMmaKeys, hi + 1 - base);
      const std::size_t q_base =
          kv.layer_offset + static_cast<std::size_t>(kvh) * ps * D + qcol * 16;
      int pi = (base + qj0) / ps, slot = base + qj0 - pi * ps;
#pragma unroll
      for (int k = 0; k < kMmaKeys / qstep; ++k) {
        const int j = qj0 + k * qstep;
        const bool live = j < n;
        const std::size_t off = live ? static_cast<std::size_t>(table[pi]) * kv.page_elems +
                                           q_base + static_cast<std::size_t>(slot) * D
                                     : 0;
        cp_async16(ks + j * D + qcol * 16, bytes + off, live);
        cp_async16(vs + j * D + qcol * 16, bytes + off + (live ? v_shift : 0), live);
        slot += qstep;
        while (slot >= ps) {
          slot -= ps;
          ++pi;
        }
      }
      const int r = threadIdx.x % kMmaKeys;
      const bool live = r < n;
      std::size_t off = 0;
      if (live) {
        const int p = base + r;
        const std::size_t row = static_cast<std::size_t>(kvh) * ps + p % ps +
                                (threadIdx.x >= kMmaKeys ? v_shift / D : 0);
        off = static_cast<std::size_t>(table[p / ps]) * kv.page_elems + kv.layer_offset +
              kv.scales_offset + 4 * row;
      }
      detail::cp_async4(scales + threadIdx.x, bytes + off, live);
    } else {
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
        cp_async16(v_s + (st * kMmaKeys + j) * ld + col * 8, pool + off + (live ? v_shift : 0),
                   live);
        slot += step;
        while (slot >= ps) {
          slot -= ps;
          ++pi;
        }
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
    [[maybe_unused]] const unsigned char* q_stage = q_st + stage * QLay::stage;
    if constexpr (kQuant) {
      // The stage's bytes into the 16-bit tiles (every thread: the block reads them after).
      constexpr int per_row = D / 16;
      for (int c = threadIdx.x; c < 2 * kMmaKeys * per_row; c += kMmaThreads) {
        const bool value = c >= kMmaKeys * per_row;
        const int cc = value ? c - kMmaKeys * per_row : c, r = cc / per_row, col = cc % per_row;
        const uint4 w = *reinterpret_cast<const uint4*>(q_stage + (value ? kMmaKeys * D : 0) +
                                                        r * D + col * 16);
        uint4* dst = reinterpret_cast<uint4*>((value ? v_s : k_s) + r * ld + col * 16);
        dst[0] = make_uint4(
            detail::kv_pair<T, KV>(w.x, w.y, 0, 1), detail::kv_pair<T, KV>(w.x, w.y, 2, 3),
            detail::kv_pair<T, KV>(w.x, w.y, 4, 5), detail::kv_pair<T, KV>(w.x, w.y, 6, 7));
        dst[1] = make_uint4(
            detail::kv_pair<T, KV>(w.z, w.w, 0, 1), detail::kv_pair<T, KV>(w.z, w.w, 2, 3),
            detail::kv_pair<T, KV>(w.z, w.w, 4, 5), detail::kv_pair<T, KV>(w.z, w.w, 6, 7));
      }
      __syncthreads();
    }
    if (base <= warp_hi && base + kMmaKeys > warp_lo) {
      const T* kt = k_s + (kQuant ? 0 : stage) * kMmaKeys * ld;
      const T* vt = v_s + (kQuant ? 0 : stage) * kMmaKeys * ld;
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
      // One-byte pages: key j * 8 + 2t + e's scale into column e of block j.
      [[maybe_unused]] const float2* k_scales =
          reinterpret_cast<const float2*>(q_stage + 2 * kMmaKeys * D);  // [kMmaKeys / 2]
      if constexpr (kQuant) {
#pragma unroll
        for (int j = 0; j < kMmaKeys / 8; ++j) {
          const float2 f = k_scales[j * 4 + t];
          s[j][0] *= f.x;
          s[j][1] *= f.y;
          s[j][2] *= f.x;
          s[j][3] *= f.y;
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
        if constexpr (kQuant) {
          // The weights times V's scales (and the boost); l sums them unscaled.
          constexpr float boost = detail::kv_weight_boost<KV>;
          const float2 v = k_scales[kMmaKeys / 2 + j * 4 + t];
          const float va = v.x * boost, vb = v.y * boost;
          sum0 += p0 + p1;
          sum1 += p2 + p3;
          pf[j / 2][(j & 1) * 2 + 0] = pack2<T>(p0 * va, p1 * vb);
          pf[j / 2][(j & 1) * 2 + 1] = pack2<T>(p2 * va, p3 * vb);
        } else {
          const unsigned u01 = pack2<T>(p0, p1), u23 = pack2<T>(p2, p3);
          const float2 r01 = unpack2<T>(u01), r23 = unpack2<T>(u23);
          sum0 += r01.x + r01.y;  // l sums what P V multiplies
          sum1 += r23.x + r23.y;
          pf[j / 2][(j & 1) * 2 + 0] = u01;
          pf[j / 2][(j & 1) * 2 + 1] = u23;
        }
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
  if constexpr (kQuant) {  // O carries kv_weight_boost (exact: a power of two)
    l0 *= detail::kv_weight_boost<KV>;
    l1 *= detail::kv_weight_boost<KV>;
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

using MmaPrefillKernel = void (*)(AttentionArgs, FlatBatchView, PagedKvView, const PrefillTile*);

// Pipeline depth: 3 stages measured the same as 2 on the 8b shape (7.43 ms per 2048-token
// prefill either way), so 2, with less shared memory.
constexpr int kMmaStages = 2;

template <class T, class KV = T>
MmaPrefillKernel prefill_mma_kernel(int D) {
  if (D == 64) return prefill_kernel_mma<T, KV, 64, kMmaStages>;
  if (D == 128) return prefill_kernel_mma<T, KV, 128, kMmaStages>;
  return nullptr;
}

template <class T>
void allow_all_shared_memory(int bytes) {
  for (int D : {64, 128}) {
    for (MmaPrefillKernel k : {prefill_mma_kernel<T>(D), prefill_mma_kernel<T, detail::KvInt8>(D),
                               prefill_mma_kernel<T, detail::KvFp8>(D)})
      cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  }
}

}  // namespace

namespace detail {

std::size_t prefill_mma_shared(int D, KvDtype dtype) {
  const bool one_byte = kv_dtype_scaled(dtype);
  if (D == 64)
    return one_byte ? MmaPrefillQuantLayout<64, kMmaStages>::bytes
                    : MmaPrefillLayout<64, kMmaStages>::bytes;
  if (D == 128)
    return one_byte ? MmaPrefillQuantLayout<128, kMmaStages>::bytes
                    : MmaPrefillLayout<128, kMmaStages>::bytes;
  return 0;
}

void prepare_prefill_attention_mma(int bytes) {
  allow_all_shared_memory<__nv_bfloat16>(bytes);
  allow_all_shared_memory<__half>(bytes);
}

void prefill_attention_mma(const AttentionArgs& args, const FlatBatchView& batch,
                           const PagedKvView& kv, const PrefillTile* tiles, int num_tiles,
                           int mma_shared, cudaStream_t stream) {
  const int D = kv.head_dim;
  WEFT_DISPATCH_KV(kv, {
    prefill_mma_kernel<T, KV>(
        D)<<<dim3(args.num_heads, num_tiles), kMmaThreads, mma_shared, stream>>>(args, batch, kv,
                                                                                 tiles);
  });
}

}  // namespace detail
}  // namespace weft::cuda
