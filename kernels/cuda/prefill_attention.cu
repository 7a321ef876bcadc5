// The prefill attention (prefill_attention, paged_attention.hpp): the CUDA-core kernel (any
// head_dim up to 256; the one int8/fp8 pages take), the WMMA tensor-core kernel (head_dim a
// multiple of 16), and the choice between them and the mma.sync kernel of
// prefill_attention_mma.cu, which runs where it can.

#include <mma.h>

#include <cstdlib>
#include <cstring>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_element.cuh"
#include "kernels/cuda/paged_attention.cuh"
#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/prefill_attention.hpp"

namespace weft::cuda {
namespace {

using detail::first_position;
using detail::key_offset;
using detail::row_scale;
using detail::tile_key_range;

constexpr int kKeyTile = 32;  // prefill: keys per tile
constexpr int kPrefillThreads = 128;
constexpr int kMaxHeadDim = 256;

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

bool tensor_core_prefill(int head_dim) {
  return head_dim % 16 == 0 && head_dim <= kMaxHeadDim;
}

template <class T>
void allow_all_shared_memory(int bytes) {
  cudaFuncSetAttribute(prefill_kernel<T, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  for (auto* k : {prefill_kernel<T, detail::KvInt8>, prefill_kernel<T, detail::KvFp8>})
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  cudaFuncSetAttribute(prefill_kernel_tc<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

}  // namespace

namespace detail {

void prepare_prefill_attention(int bytes) {
  allow_all_shared_memory<__nv_bfloat16>(bytes);
  allow_all_shared_memory<__half>(bytes);
}

}  // namespace detail

int prefill_tile_queries(int head_dim, KvDtype dtype) {
  // One-byte pages: the mma.sync kernel (its tiles are kTcRows rows too) where it serves
  // head_dim, else the CUDA-core kernel.
  if (kv_dtype_scaled(dtype))
    return detail::prefill_mma_shared(head_dim, dtype) > 0 ? kTcRows : kPrefillTileQueries;
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
  const int mma_shared = static_cast<int>(detail::prefill_mma_shared(D, kv.dtype));
  // One-byte pages run the mma.sync kernel where it serves head_dim, whatever
  // WEFT_PREFILL_ATTENTION says (prefill_tile_queries cut their tiles for it).
  if (mma_shared > 0 && (!wmma_only || quantized)) {
    detail::prefill_attention_mma(args, batch, kv, tiles, num_tiles, mma_shared, stream);
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
