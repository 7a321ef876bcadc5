#include <cub/block/block_scan.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_compress.hpp"
#include "kernels/cuda/kv_element.cuh"

namespace weft::cuda {
namespace {

using detail::kv_to_float;

constexpr int kStatThreads = 128;
constexpr int kScoreSlots = 32;  // slots per block of the scoring pass (a lane each)
constexpr int kScoreThreads = 128;
constexpr int kSelectThreads = 512;
constexpr int kCompactRows = 32;
constexpr int kCompactThreads = 256;

// Row `slot` of kv head (or, from num_kv_heads on, value head) `head` in kv's layer.
template <class KV>
__device__ __forceinline__ KV* kv_row(const PagedKvView& kv, const std::int32_t* pages, int head,
                                      int slot) {
  const int page = pages[slot / kv.page_size];
  return static_cast<KV*>(kv.pool) + static_cast<std::size_t>(page) * kv.page_elems +
         kv.layer_offset +
         (static_cast<std::size_t>(head) * kv.page_size + slot % kv.page_size) * kv.head_dim;
}

// The row's scale (int8/fp8 pages), 1 otherwise.
template <class KV>
__device__ __forceinline__ float kv_row_scale(const PagedKvView& kv, const std::int32_t* pages,
                                              int head, int slot) {
  if constexpr (detail::kv_scaled<KV>) {
    return detail::kv_scales(kv,
                             pages[slot / kv.page_size])[head * kv.page_size + slot % kv.page_size];
  } else {
    return 1.0f;
  }
}

__device__ __forceinline__ const std::int32_t* page_table(const FlatBatchView& b, int seq) {
  return b.page_ids + b.page_table_begin[seq];
}

// Pass 1: one block per (query head, window query, job): the max and the sum of exponentials
// of the row's scaled scores over slots [0, the query's own], a warp per slot in turn, each
// warp an online softmax, the warps merged in order.
template <class KV>
__global__ void row_stats_kernel(KvCompressArgs a, FlatBatchView b, PagedKvView kv) {
  const KvCompressJob job = a.jobs[blockIdx.z];
  const int w = blockIdx.y, h = blockIdx.x;
  if (w >= job.queries) return;
  const int D = kv.head_dim;
  const int g = h / (a.num_heads / kv.num_kv_heads);
  const int last = job.slots - job.queries + w;
  const float* q = a.q + static_cast<std::size_t>(job.first_query + w) * a.q_stride +
                   static_cast<std::size_t>(h) * D;
  const std::int32_t* pages = page_table(b, job.seq);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  float m = -FLT_MAX, l = 0.0f;
  for (int s = warp; s <= last; s += warps) {
    const KV* k = kv_row<KV>(kv, pages, g, s);
    float dot = 0.0f;
    for (int d = lane; d < D; d += 32)
      dot += q[d] * kv_to_float(k[d]);
    const float x = detail::warp_sum(dot) * kv_row_scale<KV>(kv, pages, g, s) * a.scale;
    if (x > m) {
      l = l * expf(m - x) + 1.0f;
      m = x;
    } else {
      l += expf(x - m);
    }
  }
  __shared__ float ms[32], ls[32];
  if (lane == 0) {
    ms[warp] = m;
    ls[warp] = l;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float M = -FLT_MAX, L = 0.0f;
    for (int i = 0; i < warps; ++i)
      M = fmaxf(M, ms[i]);
    for (int i = 0; i < warps; ++i)
      if (ls[i] > 0.0f) L += ls[i] * expf(ms[i] - M);
    float* out = a.row_stats +
                 ((static_cast<std::size_t>(blockIdx.z) * a.max_queries + w) * a.num_heads + h) * 2;
    out[0] = M;
    out[1] = L;
  }
}

// Pass 2: one block per (tile of kScoreSlots slots, kv head, job): the tile's keys go to shared
// memory as floats, each lane owns a slot and each warp a share of the (window query, group
// head) rows; the warps' sums are added in warp order.
template <class KV>
__global__ void scores_kernel(KvCompressArgs a, FlatBatchView b, PagedKvView kv) {
  extern __shared__ float smem[];
  const KvCompressJob job = a.jobs[blockIdx.z];
  const int g = blockIdx.y;
  const int s0 = blockIdx.x * kScoreSlots;
  if (s0 >= job.slots) return;
  const int D = kv.head_dim, group = a.num_heads / kv.num_kv_heads;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const std::int32_t* pages = page_table(b, job.seq);
  float* keys = smem;                               // [kScoreSlots][D + 1]
  float* key_scale = keys + kScoreSlots * (D + 1);  // [kScoreSlots]
  float* partial = key_scale + kScoreSlots;         // [warps][32]
  for (int i = threadIdx.x; i < kScoreSlots * D; i += blockDim.x) {
    const int r = i / D, d = i % D, s = s0 + r;
    keys[r * (D + 1) + d] = s < job.slots ? kv_to_float(kv_row<KV>(kv, pages, g, s)[d]) : 0.0f;
  }
  for (int r = threadIdx.x; r < kScoreSlots; r += blockDim.x) {
    const int s = s0 + r;
    key_scale[r] = s < job.slots ? kv_row_scale<KV>(kv, pages, g, s) : 0.0f;
  }
  __syncthreads();
  const int s = s0 + lane;
  const float* key = keys + lane * (D + 1);
  const int rows = job.queries * group;
  float acc = 0.0f;
  for (int r = warp; r < rows; r += warps) {
    const int w = r / group, h = g * group + r % group;
    const int last = job.slots - job.queries + w;
    if (s0 > last) continue;  // the whole tile is after this query (uniform in the warp)
    const float* q = a.q + static_cast<std::size_t>(job.first_query + w) * a.q_stride +
                     static_cast<std::size_t>(h) * D;
    float dot = 0.0f;
    for (int d = 0; d < D; ++d)
      dot += q[d] * key[d];
    const float* st =
        a.row_stats +
        ((static_cast<std::size_t>(blockIdx.z) * a.max_queries + w) * a.num_heads + h) * 2;
    const float x = dot * key_scale[lane] * a.scale;
    if (s <= last) acc += expf(x - st[0]) / st[1];
  }
  partial[warp * 32 + lane] = acc;
  __syncthreads();
  if (warp == 0 && s < job.slots) {
    float total = 0.0f;
    for (int i = 0; i < warps; ++i)
      total += partial[i * 32 + lane];
    a.scores[job.offset + static_cast<std::size_t>(g) * job.slots + s] = total;
  }
}

// Scores as unsigned integers in the same order (floats of either sign).
__device__ __forceinline__ std::uint32_t order_key(float f) {
  const std::uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}

// One block per (kv head, job). A radix select, 8 bits a pass from the top, finds the key of
// the keep-th highest score and how many of the scores equal to it are kept (the earliest);
// then block scans in slot order list the kept slots.
__global__ void select_kernel(KvCompressArgs a) {
  using Scan = cub::BlockScan<int, kSelectThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int hist[256];
  __shared__ std::uint32_t s_prefix;
  __shared__ int s_remaining;
  const KvCompressJob job = a.jobs[blockIdx.y];
  const int g = blockIdx.x, tid = threadIdx.x;
  const float* sc = a.scores + job.offset + static_cast<std::size_t>(g) * job.slots;
  std::int32_t* kept = a.kept + job.offset + static_cast<std::size_t>(g) * job.slots;
  const int scored = max(0, job.slots - job.protect);
  const int keep = scored - min(max(job.evict, 0), scored);
  std::uint32_t prefix = 0, mask = 0;
  int remaining = keep;
  if (keep > 0) {
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = tid; i < 256; i += blockDim.x)
        hist[i] = 0;
      __syncthreads();
      for (int s = tid; s < scored; s += blockDim.x) {
        const std::uint32_t k = order_key(sc[s]);
        if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255u], 1);
      }
      __syncthreads();
      if (tid == 0) {
        int above = 0, d = 255;
        for (; d > 0; --d) {
          if (above + hist[d] >= remaining) break;
          above += hist[d];
        }
        s_prefix = prefix | (static_cast<std::uint32_t>(d) << shift);
        s_remaining = remaining - above;
      }
      __syncthreads();
      prefix = s_prefix;
      remaining = s_remaining;
      mask |= 0xFFu << shift;
      __syncthreads();
    }
  }
  int eq_before = 0, kept_before = 0;
  for (int base = 0; base < scored; base += blockDim.x) {
    const int s = base + tid;
    const std::uint32_t k = s < scored ? order_key(sc[s]) : 0u;
    const int eq = keep > 0 && s < scored && k == prefix ? 1 : 0;
    int eq_rank = 0, eq_total = 0;
    Scan(scan).ExclusiveSum(eq, eq_rank, eq_total);
    __syncthreads();
    const int keeps =
        keep > 0 && s < scored && (k > prefix || (eq != 0 && eq_before + eq_rank < remaining)) ? 1
                                                                                               : 0;
    int at = 0, kept_total = 0;
    Scan(scan).ExclusiveSum(keeps, at, kept_total);
    __syncthreads();
    if (keeps != 0) kept[kept_before + at] = s;
    eq_before += eq_total;
    kept_before += kept_total;
  }
  for (int s = scored + tid; s < job.slots; s += blockDim.x)
    kept[keep + (s - scored)] = s;
}

// One block per (kv head, K or V, job): chunks of kCompactRows destinations, each chunk's
// source rows (and scales) read into shared memory before any is written. W: the word rows
// are copied in (4 bytes when the row's bytes allow it).
template <class KV, class W>
__global__ void compact_kernel(KvCompressArgs a, FlatBatchView b, PagedKvView kv) {
  extern __shared__ __align__(16) unsigned char buffer[];
  const KvCompressJob job = a.jobs[blockIdx.z];
  const int g = blockIdx.x;
  const int head = (blockIdx.y == 1 ? kv.num_kv_heads : 0) + g;
  const int scored = max(0, job.slots - job.protect);
  const int count = job.slots - min(max(job.evict, 0), scored);
  const std::int32_t* pages = page_table(b, job.seq);
  const std::int32_t* from = a.kept + job.offset + static_cast<std::size_t>(g) * job.slots;
  const int words = kv.head_dim * static_cast<int>(sizeof(KV)) / static_cast<int>(sizeof(W));
  W* rows = reinterpret_cast<W*>(buffer);
  float* scales =
      reinterpret_cast<float*>(buffer + static_cast<std::size_t>(kCompactRows) * words * sizeof(W));
  for (int first = 0; first < count; first += kCompactRows) {
    const int n = min(kCompactRows, count - first);
    // kept is increasing with kept[i] >= i: a chunk whose last row stays has no row to move.
    if (from[first + n - 1] == first + n - 1) continue;
    for (int i = threadIdx.x; i < n * words; i += blockDim.x) {
      const int r = i / words, e = i % words;
      rows[i] = reinterpret_cast<const W*>(kv_row<KV>(kv, pages, head, from[first + r]))[e];
    }
    if constexpr (detail::kv_scaled<KV>) {
      for (int r = threadIdx.x; r < n; r += blockDim.x)
        scales[r] = kv_row_scale<KV>(kv, pages, head, from[first + r]);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n * words; i += blockDim.x) {
      const int r = i / words, e = i % words;
      if (from[first + r] != first + r)
        reinterpret_cast<W*>(kv_row<KV>(kv, pages, head, first + r))[e] = rows[i];
    }
    if constexpr (detail::kv_scaled<KV>) {
      for (int r = threadIdx.x; r < n; r += blockDim.x) {
        const int slot = first + r;
        if (from[slot] == slot) continue;
        float* block = const_cast<float*>(detail::kv_scales(kv, pages[slot / kv.page_size]));
        block[head * kv.page_size + slot % kv.page_size] = scales[r];
      }
    }
    __syncthreads();
  }
}

}  // namespace

void kv_compress_scores(const KvCompressArgs& args, const FlatBatchView& batch,
                        const PagedKvView& kv, cudaStream_t stream) {
  if (args.num_jobs == 0 || args.max_slots == 0) return;
  const dim3 stat_grid(args.num_heads, args.max_queries, args.num_jobs);
  const dim3 score_grid((args.max_slots + kScoreSlots - 1) / kScoreSlots, kv.num_kv_heads,
                        args.num_jobs);
  const std::size_t score_shared = (static_cast<std::size_t>(kScoreSlots) * (kv.head_dim + 1) +
                                    kScoreSlots + (kScoreThreads / 32) * 32) *
                                   sizeof(float);
  WEFT_DISPATCH_KV(kv, {
    row_stats_kernel<KV><<<stat_grid, kStatThreads, 0, stream>>>(args, batch, kv);
    scores_kernel<KV><<<score_grid, kScoreThreads, score_shared, stream>>>(args, batch, kv);
  });
}

void kv_compress_select(const KvCompressArgs& args, const PagedKvView& kv, cudaStream_t stream) {
  if (args.num_jobs == 0 || args.max_slots == 0) return;
  select_kernel<<<dim3(kv.num_kv_heads, args.num_jobs), kSelectThreads, 0, stream>>>(args);
}

void kv_compress_compact(const KvCompressArgs& args, const FlatBatchView& batch,
                         const PagedKvView& kv, cudaStream_t stream) {
  if (args.num_jobs == 0 || args.max_slots == 0) return;
  const dim3 grid(kv.num_kv_heads, 2, args.num_jobs);
  WEFT_DISPATCH_KV(kv, {
    const std::size_t row_bytes = static_cast<std::size_t>(kv.head_dim) * sizeof(KV);
    const std::size_t shared = kCompactRows * (row_bytes + sizeof(float));
    if (row_bytes % 4 == 0) {
      compact_kernel<KV, std::uint32_t><<<grid, kCompactThreads, shared, stream>>>(args, batch, kv);
    } else {
      compact_kernel<KV, unsigned char><<<grid, kCompactThreads, shared, stream>>>(args, batch, kv);
    }
  });
}

}  // namespace weft::cuda
