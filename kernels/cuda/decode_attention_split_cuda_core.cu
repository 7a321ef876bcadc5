// The per-split decode attention's CUDA-core kernels (decode_attention_split.hpp): the warp
// kernel (head_dim 32 with 16-bit pages; 32, 64, 128 and 256 with int8/fp8 pages; up to 8
// query heads per kv head) and the scalar kernel for every other shape. They write the same
// split records as the tensor-core kernel of decode_attention_split.cu, whose launch runs them
// where it does not serve and then combines the splits.

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_attention_split.hpp"
#include "kernels/cuda/kv_element.cuh"
#include "kernels/cuda/paged_attention.cuh"
#include "kernels/cuda/tree_slots.cuh"

namespace weft::cuda {
namespace {

using detail::decode_span;
using detail::DecodeSpan;
using detail::kDecodeThreads;
using detail::key_offset;
using detail::kMaxGroupInRegisters;
using detail::row_scale;

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

template <class T>
void allow_all_shared_memory(int bytes) {
  cudaFuncSetAttribute(decode_kernel<T, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  for (auto* k : {decode_kernel<T, detail::KvInt8>, decode_kernel<T, detail::KvFp8>})
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

}  // namespace

namespace detail {

void prepare_decode_split_cuda_core(int bytes) {
  allow_all_shared_memory<__nv_bfloat16>(bytes);
  allow_all_shared_memory<__half>(bytes);
}

void decode_attention_split_cuda_core(const AttentionArgs& args, const FlatBatchView& batch,
                                      const PagedKvView& kv, const std::int32_t* query_tokens,
                                      dim3 grid, float* workspace, cudaStream_t stream) {
  const int G = args.num_heads / kv.num_kv_heads, D = kv.head_dim;
  WEFT_DISPATCH_KV(kv, {
    if (auto* warp_kernel = decode_warp_kernel<T, KV>(D, G)) {
      detail::launch(warp_kernel, grid, kDecodeThreads, 0, stream, args, batch, kv, query_tokens,
                     workspace);
    } else {
      const std::size_t shared = sizeof(float) * (2 * G * D + G * kDecodeThreads + 3 * G + 1) +
                                 sizeof(std::size_t) * kDecodeThreads + 8;
      detail::launch(decode_kernel<T, KV>, grid, kDecodeThreads, shared, stream, args, batch, kv,
                     query_tokens, workspace);
    }
  });
}

}  // namespace detail
}  // namespace weft::cuda
