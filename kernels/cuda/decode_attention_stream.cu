// The streaming tensor-core decode attention (DecodeAttentionKernel::kStream,
// WEFT_DECODE_ATTN=stream; docs/cuda.md, "Streaming decode attention", says why it is shaped
// this way).
//
// One block of 4 warps per (query token, kv head, part). A token's context [first, pos] is
// cut into segments of `seg` positions (a multiple of 64 that depends only on the context's
// length: at least WEFT_DECODE_STREAM_SEGMENT_KEYS, 256 by default, and never more than 32
// segments); a part is a run of consecutive segments, as many as the launch chooses from the
// batch and the device so that the grid fills the GPU.
//
// The point is to keep every SM's memory pipe full without block-wide waits:
// - each warp owns a ring of `stages` shared-memory stages and streams its own tiles of 16
//   keys (tiles w, w + 4, w + 8, ... of the part: with 16-token pages, one page each) through
//   it with cp.async, 16 bytes per instruction; while it computes one tile the next
//   stages - 1 are in flight, and the page-table lookups of the tile after those are loaded
//   into registers (lane r holds row r's offset; the copy takes it by shuffle). Nothing in the
//   main loop waits for another warp: a warp waits on its own copies (__syncwarp);
// - a tile's products are the per-split kernel's (mma.sync m16n8k16, q*scale and the softmax
//   weights split into a 16-bit value and a 16-bit remainder, fp32 accumulators; the group's
//   query heads are the columns, so each key and value byte is read once per kv head);
// - at a segment's end the four warps merge their (o, m, l) in warp order (the block's only
//   barriers, every `seg` keys), and the segment is folded into the block's running result in
//   segment order (fold_split: every rounding spelled out), or written as a record for the
//   combine kernel when the token's context spans more than one part. The combine folds the
//   records in the same order with the same roundings, so a token's output has the same bits
//   however the launch cut its context into parts: it depends only on the token's own
//   context, not on the batch.
// int8 and fp8 pages (decode_tile_quant.cuh): the ring stages one-byte tiles and their rows'
// scales, and the tile step converts them to the 16-bit type exactly; no fused rotary
// embedding for them (decode_attention_applies_rope says no).
// With AttentionArgs::rope_inv_freq every block rotates q, and the block whose part ends at
// the token's own position rotates the token's key, stores key and value into the page slot
// and patches them into the staged tile once it lands (the copy may have read the slot first):
// bitwise rope_store_kv followed by the kernel, as the other tensor-core decode kernels do.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_attention_stream.hpp"
#include "kernels/cuda/decode_prologue.cuh"
#include "kernels/cuda/decode_tile.cuh"
#include "kernels/cuda/decode_tile_quant.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/env_knob.hpp"
#include "kernels/cuda/tree_slots.cuh"

namespace weft::cuda::detail {
namespace {

constexpr int kThreads = 128, kWarps = kThreads / 32;
constexpr int kTileKeys = 16;  // keys per warp tile: one m16n8k16 PV product
constexpr int kMaxGroup = 8;   // query heads per kv head
constexpr int kMaxStages = 4;
// One-byte tiles are half the bytes: a deeper ring keeps as many bytes in flight.
constexpr int kMaxStagesQuant = 6;
template <class KV>
inline constexpr int kMaxStagesOf = kv_scaled<KV> ? kMaxStagesQuant : kMaxStages;

// Dynamic shared memory: the warps' merge area [kWarps][GM][D] fp32, then each warp's ring of
// `stages` stages of K [16][D] and V [16][D] (16-bit, swizzled rows; or one-byte rows and
// their 32 fp32 scales, decode_tile_quant.cuh).
template <int D, int GM>
inline constexpr std::size_t kMergeBytes = sizeof(float) * (kWarps * GM * D);
template <class KV, int D, int GM>
struct StreamLayout {
  static constexpr std::size_t red_bytes = kMergeBytes<D, GM>;
  static constexpr std::size_t stage_bytes =
      2ull * kTileKeys * D * sizeof(KV) + (kv_scaled<KV> ? 2 * kTileKeys * sizeof(float) : 0);
  static std::size_t bytes(int stages) { return red_bytes + kWarps * stages * stage_bytes; }
};

__device__ __forceinline__ void wait_for_tile(int stages) {
  // Tile n has landed once at most stages - 2 later groups are pending.
  if (stages <= 2) {
    cp_async_wait<0>();
  } else if (stages == 3) {
    cp_async_wait<1>();
  } else if (stages == 4) {
    cp_async_wait<2>();
  } else if (stages == 5) {
    cp_async_wait<3>();
  } else {
    cp_async_wait<4>();
  }
}

// KV: T for 16-bit pages, or KvInt8 / KvFp8 (one-byte pages; no rotary embedding fused:
// decode_attention_applies_rope is false for them, so rope_store_kv has stored the token).
template <class T, class KV, int D, int GM>
__global__ void __launch_bounds__(kThreads, D >= 256 ? 1 : 2)
    decode_kernel_stream(AttentionArgs a, FlatBatchView b, PagedKvView kv,
                         const std::int32_t* query_tokens, float* workspace, int grid_splits,
                         int parts, int stages, int seg_min, bool release) {
  constexpr bool kQuant = kv_scaled<KV>;
  constexpr int kStagesMax = kMaxStagesOf<KV>;
  constexpr int kVec = 8, L = D / kVec;    // 16-byte chunks per 16-bit row
  constexpr int LC = kQuant ? D / 16 : L;  // 16-byte chunks per staged row
  constexpr int KC = D / 32;               // k chunks of 32 elements (two mma k-steps each)
  constexpr int VW = D / 16;               // 32-bit words of V per lane and key
  constexpr int RS = 32 / LC;              // rows one warp-wide copy instruction covers
  constexpr int CPL = kTileKeys / RS;      // copy instructions per lane, K (and V), per tile
  // 16-byte chunks per stage: K then V, then (one-byte rows) 32 scales.
  constexpr int kStageChunks = 2 * kTileKeys * LC + (kQuant ? 2 * kTileKeys / 4 : 0);
  constexpr int EPT = (GM * D + kThreads - 1) / kThreads;  // folded elements per thread
  static_assert(LC <= 32 && 32 % LC == 0 && kTileKeys % RS == 0);
  using RowAt = std::conditional_t<kQuant, QuantRow, unsigned>;
  extern __shared__ __align__(16) unsigned char stream_smem[];
  float* red_acc = reinterpret_cast<float*>(stream_smem);  // [kWarps][GM][D]
  __shared__ float red_m[kWarps][GM], red_l[kWarps][GM], fac[kWarps][GM];
  __shared__ float fold_a[GM], fold_b[GM], fold_l[GM];
  __shared__ float rope_c[D / 2], rope_s[D / 2];
  __shared__ __align__(16) uint4 own_s[2 * L];  // the token's own key row, then value row

  grid_dependency_wait_then_release(release);
  const int qi = blockIdx.y;
  const TokenPieces ts = token_pieces(a, b, query_tokens, qi, seg_min);
  const int t = ts.t, pos = ts.pos;
  // The token's segments in `parts` runs (fewer where it has fewer segments). Cut per token
  // from its own segment count, so a CUDA graph captured at another context stays valid.
  const int spp = (ts.used + parts - 1) / parts;
  const int s0 = blockIdx.z * spp;
  if (s0 >= ts.used) return;  // this token's context has fewer parts than the grid
  const int s1 = min(ts.used, s0 + spp);
  const bool whole = s0 == 0 && s1 == ts.used;  // folds every segment, writes the output
  const int begin = ts.first + s0 * ts.size, end = min(pos + 1, ts.first + s1 * ts.size);
  const int ntiles = (end - begin + kTileKeys - 1) / kTileKeys;
  const int seg_tiles = ts.size / kTileKeys;  // a multiple of kWarps (seg: multiple of 64)
  const int kvh = blockIdx.x;
  const SlotTable table = slot_table(b, t);  // tree nodes: their path's slots
  const int G = a.num_heads / kv.num_kv_heads, NH = a.num_heads;
  const T* pool = static_cast<const T*>(kv.pool);
  const unsigned char* bytes = static_cast<const unsigned char*>(kv.pool);
  const std::size_t v_shift = static_cast<std::size_t>(kv.num_kv_heads) * kv.page_size * D;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, tq = lane & 3;
  // This warp's tiles: n = 0, 1, ... is tile warp + 4n of the part.
  const int nw = ntiles > warp ? (ntiles - warp + kWarps - 1) / kWarps : 0;
  uint4* ring = reinterpret_cast<uint4*>(stream_smem + kMergeBytes<D, GM>) +
                static_cast<std::size_t>(warp) * stages * kStageChunks;
  auto tile_start = [&](int n) { return begin + (warp + kWarps * n) * kTileKeys; };

  // Lane r < 16: the row offset (in head_dim units from the pool's start: pages and layer
  // blocks are whole rows) of key r of warp tile n; 0 past the part. One-byte rows: lane r and
  // lane r + 16 the byte offsets of key r's row and of its K (lane r) or V (lane r + 16) scale.
  auto row_offset = [&](int n) -> RowAt {
    const int p = tile_start(n) + (lane & (kTileKeys - 1));
    if (n >= nw || p >= end) return RowAt{};
    if constexpr (kQuant) {
      return quant_row(kv, table, p, kvh, lane >= kTileKeys);
    } else {
      return static_cast<unsigned>(key_offset(kv, table, p, kvh) / D);
    }
  };
  // Warp tile n into its stage (nothing past the warp's last tile); `off` from row_offset(n).
  auto issue = [&](int n, RowAt off) {
    if (n >= nw) return;  // warp-uniform
    if constexpr (kQuant) {
      uint4* ks = ring + (n % stages) * kStageChunks;
      uint4* vs = ks + kTileKeys * LC;
      float* scales = reinterpret_cast<float*>(vs + kTileKeys * LC);
      const int tb = tile_start(n), part = lane % LC;
#pragma unroll
      for (int k = 0; k < CPL; ++k) {
        const int r = lane / LC + k * RS;
        const unsigned long long src = __shfl_sync(0xffffffffu, off.key, r);
        const bool live = tb + r < end;
        const unsigned char* row = bytes + src + part * 16;
        cp_async16(ks + qk_chunk_at<D>(r, part), row, live);
        cp_async16(vs + qv_chunk_at<D>(r, part), row + v_shift, live);
      }
      cp_async4(scales + lane, bytes + off.scale, tb + (lane & (kTileKeys - 1)) < end);
    } else {
      uint4* ks = ring + (n % stages) * kStageChunks;
      uint4* vs = ks + kTileKeys * L;
      const int tb = tile_start(n), part = lane % L;
#pragma unroll
      for (int k = 0; k < CPL; ++k) {
        const int r = lane / L + k * RS;
        const unsigned src = __shfl_sync(0xffffffffu, off, r);
        const bool live = tb + r < end;
        const T* row = pool + static_cast<std::size_t>(src) * D + part * kVec;
        const int at = r * L + (part ^ tile_swizzle(r));
        cp_async16(ks + at, row, live);
        cp_async16(vs + at, row + v_shift, live);
      }
    }
  };
  // The first stages - 1 tiles in flight (a group per stage, empty past the warp's last),
  // their page-table lookups loaded together.
  RowAt off_first[kStagesMax];
#pragma unroll
  for (int s = 0; s < kStagesMax; ++s)
    off_first[s] = s < stages ? row_offset(s) : RowAt{};
#pragma unroll
  for (int s = 0; s + 1 < kStagesMax; ++s) {
    if (s + 1 < stages) {
      issue(s, off_first[s]);
      cp_async_commit();
    }
  }
  RowAt off_next = off_first[0];  // row offsets of tile n + stages - 1 in the loop
#pragma unroll
  for (int s = 1; s < kStagesMax; ++s)
    if (s == stages - 1) off_next = off_first[s];

  // Head g's q (loads in flight before the rotary embedding's barrier).
  float x[KC][8];
  load_query<D>(x, a, t, kvh, G, g, tq);

  // With a.rope_inv_freq: rope_store_kv's work for this token (see the top of the file); the
  // token's own key and value rows also go to own_s, for every warp to patch into its tile.
  const bool rope = !kQuant && a.rope_inv_freq != nullptr;
  const bool own_kv = rope && end == pos + 1;
  if constexpr (!kQuant) {
    uint4 own[2] = {};
    rope_own_kv<T, D, kThreads, true>(a, b, kv, table, t, pos, kvh, rope, own_kv, rope_c, rope_s,
                                      own, own_s);
    if (own_kv) __syncthreads();  // own_s complete before any warp patches its tile
  }

  // A fragments of q * scale (head g; rows 8-15 are zero), high parts and remainders.
  unsigned qh[KC][4], ql[KC][4];
  query_fragments<T>(x, rope && g < G, tq, rope_c, rope_s, a.scale, qh, ql);

  float acc[VW][4], m, l;  // head g's running max and this lane's part of its sum
  clear_split(acc, m, l);
  // The fold of the segments so far (whole blocks): elements threadIdx.x + k * kThreads of
  // [G][D], and on thread h < G head h's running max and sum.
  float fo[EPT];
#pragma unroll
  for (int k = 0; k < EPT; ++k)
    fo[k] = 0.0f;
  float fold_max = -INFINITY, fold_sum = 0.0f;

  int n = 0;  // the warp's next tile
  for (int s = s0; s < s1; ++s) {
    const int seg_end_tile = min(ntiles, (s - s0 + 1) * seg_tiles);
    for (; n < nw && warp + kWarps * n < seg_end_tile; ++n) {
      wait_for_tile(stages);
      __syncwarp();  // tile n visible to the warp; every lane done with tile n - 1's stage
      issue(n + stages - 1, off_next);
      cp_async_commit();
      off_next = row_offset(n + stages);
      uint4* ks = ring + (n % stages) * kStageChunks;
      const int k0 = tile_start(n);
      if constexpr (kQuant) {
        const unsigned char* kb = reinterpret_cast<const unsigned char*>(ks);
        tile_attend_q<T, KV, D>(kb, kb + kTileKeys * D,
                                reinterpret_cast<const float*>(kb + 2 * kTileKeys * D), k0, end, g,
                                tq, qh, ql, m, l, acc);
      } else {
        uint4* vs = ks + kTileKeys * L;
        if (own_kv && pos - k0 < kTileKeys) {  // the tile holding the token's own key
          const int rr = pos - k0, sw = tile_swizzle(rr);
          for (int c = lane; c < 2 * L; c += 32) {
            const int part = c % L;
            (c < L ? ks : vs)[rr * L + (part ^ sw)] = own_s[c];
          }
          __syncwarp();
        }
        tile_attend16<T, L, true>(ks, vs, 0, k0, end, g, tq, qh, ql, m, l, acc);
      }
    }

    // Segment s ends: merge the warps in order, then fold the segment in or write its record.
    // One-byte tiles: acc carries kv_weight_boost (decode_tile_quant.cuh); l takes it here.
    if constexpr (kQuant) l *= kv_weight_boost<KV>;
    merge_split<D, GM>(G, warp, g, tq, m, l, acc, red_acc, red_m, red_l, fac, fold_a, fold_b,
                       fold_l, whole, fold_max, fold_sum, fo, workspace, qi, NH, kvh, grid_splits,
                       s);
    __syncthreads();  // the merge area is rewritten at the next segment's end
    clear_split(acc, m, l);
  }
  cp_async_wait<0>();  // no copy outlives the block (the groups past the last tile are empty)

  if (whole) write_folded<T, D, EPT, kThreads>(a, t, kvh, G, fo, fold_l);
}

// Folds the segment records of the tokens whose context was cut into more than one part, in
// segment order, bitwise as a whole block folds them; one block per (head, query).
template <class T>
__global__ void stream_combine_kernel(AttentionArgs a, FlatBatchView b, int head_dim,
                                      const std::int32_t* query_tokens, const float* workspace,
                                      int grid_splits, int parts, int seg_min, bool release) {
  grid_dependency_wait_then_release(release);
  const int h = blockIdx.x, qi = blockIdx.y, D = head_dim;
  const TokenPieces ts = token_pieces(a, b, query_tokens, qi, seg_min);
  if ((ts.used + parts - 1) / parts >= ts.used) return;  // one part: its block wrote the output
  const float* recs =
      workspace + (static_cast<std::size_t>(qi) * a.num_heads + h) * grid_splits * (D + 2);
  fold_records<T>(a, ts.t, h, D, ts.used, recs);
}

// decode_kv_read's kernel: a block of 256 threads per (kv head, query); warp w reads the
// token's 16-key tiles w, w + 8, ... (8 KB of K and V at head_dim 128 in flight per warp; 2
// blocks per SM).
constexpr int kReadThreads = 256;
__global__ void __launch_bounds__(kReadThreads, 2)
    kv_read_kernel(FlatBatchView b, PagedKvView kv, const std::int32_t* query_tokens,
                   unsigned* sink) {
  grid_dependency_wait();
  const int t = query_tokens[blockIdx.y], kvh = blockIdx.x;
  const int pos = b.positions[t];
  const SlotTable table = slot_table(b, t);
  const int D = kv.head_dim, L = D / 8;  // 16-byte chunks per row
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = kReadThreads / 32;
  const std::size_t v_bytes = static_cast<std::size_t>(kv.num_kv_heads) * kv.page_size * D * 2;
  const unsigned char* pool = static_cast<const unsigned char*>(kv.pool);
  const int tiles = (pos + 1 + kTileKeys - 1) / kTileKeys;
  const int chunks = kTileKeys * L;  // per tile, of K (and of V)
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (int tile = warp; tile < tiles; tile += warps) {
    uint4 v[2][8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int c = lane + 32 * k, p = tile * kTileKeys + c / L;
      const bool live = c < chunks && p <= pos;
      // key_offset counts 16-bit elements.
      const std::size_t off = live ? (key_offset(kv, table, p, kvh) + (c % L) * 8) * 2 : 0;
      v[0][k] = live ? __ldcs(reinterpret_cast<const uint4*>(pool + off)) : make_uint4(0, 0, 0, 0);
      v[1][k] = live ? __ldcs(reinterpret_cast<const uint4*>(pool + off + v_bytes))
                     : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        acc.x ^= v[h][k].x;
        acc.y ^= v[h][k].y;
        acc.z ^= v[h][k].z;
        acc.w ^= v[h][k].w;
      }
  }
  unsigned word = acc.x ^ acc.y ^ acc.z ^ acc.w;
  for (int o = 16; o > 0; o >>= 1)
    word ^= __shfl_xor_sync(0xffffffffu, word, o);
  __shared__ unsigned words[kReadThreads / 32];
  if (lane == 0) words[warp] = word;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned all = 0;
    for (int w = 0; w < warps; ++w)
      all ^= words[w];
    sink[static_cast<std::size_t>(blockIdx.y) * gridDim.x + blockIdx.x] = all;
  }
}

using StreamKernel = void (*)(AttentionArgs, FlatBatchView, PagedKvView, const std::int32_t*,
                              float*, int, int, int, int, bool);

template <class T, class KV, int D>
StreamKernel stream_kernel_for_group(int G) {
  if (G <= 4) return decode_kernel_stream<T, KV, D, 4>;
  return decode_kernel_stream<T, KV, D, kMaxGroup>;
}

// The kernel for 16-bit type T and page element type KV (T, KvInt8 or KvFp8).
template <class T, class KV = T>
StreamKernel stream_kernel(int D, int G) {
  if (G < 1 || G > kMaxGroup) return nullptr;
  switch (D) {
    case 64:
      return stream_kernel_for_group<T, KV, 64>(G);
    case 128:
      return stream_kernel_for_group<T, KV, 128>(G);
    case 256:
      return stream_kernel_for_group<T, KV, 256>(G);
    default:
      return nullptr;
  }
}

// Dynamic shared memory of a block over pages of KV elements (one_byte: int8 or fp8 pages).
template <class KV>
std::size_t stream_shared_bytes_of(int D, int G, int stages) {
  const bool small = G <= 4;
  switch (D) {
    case 64:
      return small ? StreamLayout<KV, 64, 4>::bytes(stages)
                   : StreamLayout<KV, 64, kMaxGroup>::bytes(stages);
    case 128:
      return small ? StreamLayout<KV, 128, 4>::bytes(stages)
                   : StreamLayout<KV, 128, kMaxGroup>::bytes(stages);
    default:
      return small ? StreamLayout<KV, 256, 4>::bytes(stages)
                   : StreamLayout<KV, 256, kMaxGroup>::bytes(stages);
  }
}
std::size_t stream_shared_bytes(int D, int G, int stages, bool one_byte) {
  return one_byte ? stream_shared_bytes_of<KvInt8>(D, G, stages)
                  : stream_shared_bytes_of<__nv_bfloat16>(D, G, stages);
}

// Positions per segment at least (WEFT_DECODE_STREAM_SEGMENT_KEYS: a multiple of 64 from 64
// to 4096; 256 by default). Read once: it sets the kernel's numerics (results stay batch
// invariant for any value) and the granularity of its parts.
int stream_min_segment() {
  static const int keys = [] {
    constexpr int kDefault = 256;
    const int v = env_int("WEFT_DECODE_STREAM_SEGMENT_KEYS", kDefault);
    if (!decode_segment_keys_valid(v)) {
      std::fprintf(stderr,
                   "weft: ignoring WEFT_DECODE_STREAM_SEGMENT_KEYS=%d (expected a multiple of 64 "
                   "from 64 to 4096)\n",
                   v);
      return kDefault;
    }
    return v;
  }();
  return keys;
}

int g_optin_bytes = 0;  // shared memory a block may opt into (prepare_decode_stream)
int g_sms = 0;          // multiprocessors

// Blocks of `kernel` resident per SM with `shared` bytes, cached (0 where the query failed).
int blocks_per_sm(StreamKernel kernel, std::size_t shared) {
  static std::mutex mu;
  static std::map<std::pair<StreamKernel, std::size_t>, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(kernel, shared);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  int per_sm = 0;
  if (g_optin_bytes > 0 && shared + 2048 > static_cast<std::size_t>(g_optin_bytes)) {
    per_sm = 0;  // does not fit a block
  } else if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                 &per_sm, kernel, kThreads, static_cast<int>(shared)) != cudaSuccess) {
    cudaGetLastError();
    per_sm = 0;
  }
  cache.emplace(key, per_sm);
  return per_sm;
}

// Ring stages per warp: WEFT_DECODE_STREAM_STAGES (2-4; 2-6 for one-byte pages) if it fits,
// else 2. Two stages measured at least as fast as the deepest ring that keeps two blocks per SM
// (3 for 16-bit pages at head_dim 128) on the H100 at batches 1-512 and contexts 64-2,048:
// 0.3-2% faster with 16-bit pages (within 0.5% at 256-512 x 512), 0.4-3.8% with fp8 pages
// (docs/PERFORMANCE.md, "Where a ShareGPT-shaped run's time goes ..."). The ring depth only
// paces the copies: results do not depend on it.
int stream_stages(StreamKernel kernel, int D, int G, bool one_byte) {
  static const int env = env_int("WEFT_DECODE_STREAM_STAGES", 0);
  const int most = one_byte ? kMaxStagesQuant : kMaxStages;
  if (env >= 2 && env <= most &&
      blocks_per_sm(kernel, stream_shared_bytes(D, G, env, one_byte)) > 0)
    return env;
  return 2;
}

// Parts per token for `items` (query, kv head) pairs whose contexts have up to `segments`
// segments of `seg` positions, with `resident` blocks at once on the device: the fewest
// parts (each block's setup paid once, no combine) unless more parts fill the device better.
// Cost in positions one block streams: waves x (positions per part + a block's setup), plus
// the combine kernel; a wave that is not full still counts as its fraction, since each block
// keeps several tiles in flight. WEFT_DECODE_PARTS forces the part count (tests, tuning).
int choose_parts(long long items, int segments, int seg, int resident) {
  const int forced = decode_attention_parts();
  if (forced > 0) return std::min(forced, segments);
  // WEFT_DECODE_STREAM_PART_KEYS: at most this many positions per part (0: no bound), which
  // bounds the tail of a few long contexts among short ones.
  static const int max_keys = env_int("WEFT_DECODE_STREAM_PART_KEYS", 0);
  constexpr double kSetup = 128, kCombine = 128;
  int best = 1;
  double best_cost = -1;
  for (int parts = 1; parts <= segments; ++parts) {
    const int spp = (segments + parts - 1) / parts;
    if (max_keys > 0 && spp > 1 && spp * seg > max_keys) continue;
    const double blocks = static_cast<double>(items) * parts;
    const double waves = std::max(1.0, blocks / std::max(1, resident));
    const double cost = waves * (spp * seg + kSetup) + (parts > 1 ? kCombine : 0);
    if (best_cost < 0 || cost < best_cost - 1e-9) {
      best_cost = cost;
      best = parts;
    }
  }
  return best;
}

int grid_decode_splits(int max_context) {
  return std::min(kMaxDecodeSplits, (max_context + kDecodeSplitQuantum - 1) / kDecodeSplitQuantum);
}

}  // namespace

// Every page type is served (16-bit, and int8 / fp8 rows converted exactly in the tile step),
// so only the shape decides.
bool decode_stream_supports(int num_heads, int num_kv_heads, int head_dim, KvDtype /*dtype*/) {
  if (num_kv_heads <= 0 || num_heads % num_kv_heads != 0) return false;
  return stream_kernel<__nv_bfloat16>(head_dim, num_heads / num_kv_heads) != nullptr;
}

void prepare_decode_stream(int bytes) {
  g_optin_bytes = bytes;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    cudaGetLastError();
    g_sms = 0;
  }
  for (int D : {64, 128, 256}) {
    for (int G : {4, kMaxGroup}) {
      const StreamKernel sixteen[] = {stream_kernel<__nv_bfloat16>(D, G),
                                      stream_kernel<__half>(D, G)};
      const StreamKernel one_byte[] = {
          stream_kernel<__nv_bfloat16, KvInt8>(D, G), stream_kernel<__nv_bfloat16, KvFp8>(D, G),
          stream_kernel<__half, KvInt8>(D, G), stream_kernel<__half, KvFp8>(D, G)};
      for (bool quant : {false, true}) {
        for (StreamKernel k : quant ? std::vector<StreamKernel>(one_byte, one_byte + 4)
                                    : std::vector<StreamKernel>(sixteen, sixteen + 2)) {
          cudaFuncAttributes attr{};
          if (cudaFuncGetAttributes(&attr, k) != cudaSuccess) {
            cudaGetLastError();
            continue;
          }
          cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               bytes - static_cast<int>(attr.sharedSizeBytes));
          // Fills the occupancy cache now, outside any stream capture.
          for (int s = 2; s <= (quant ? kMaxStagesQuant : kMaxStages); ++s)
            blocks_per_sm(k, stream_shared_bytes(D, G, s, quant));
        }
      }
    }
  }
}

int stream_segment_keys(int asked) {
  return decode_segment_keys_valid(asked) ? asked : stream_min_segment();
}

DecodeStreamLaunch decode_stream_launch(int num_heads, int num_kv_heads, int head_dim,
                                        int num_queries, int max_context, KvDtype dtype,
                                        int segment_keys) {
  prepare_attention_kernels();
  DecodeStreamLaunch out;
  const int G = num_heads / std::max(1, num_kv_heads), D = head_dim;
  const bool one_byte = kv_dtype_scaled(dtype);
  // The bf16 instantiation stands for its dtype's (same shared memory and launch bounds).
  StreamKernel kernel = dtype == KvDtype::kInt8      ? stream_kernel<__nv_bfloat16, KvInt8>(D, G)
                        : dtype == KvDtype::kFp8E4M3 ? stream_kernel<__nv_bfloat16, KvFp8>(D, G)
                                                     : stream_kernel<__nv_bfloat16>(D, G);
  if (kernel == nullptr) return out;
  const int seg_min = stream_segment_keys(segment_keys);
  const int ctx = std::max(max_context, 1);
  out.segment_keys = piece_positions(ctx, seg_min);
  const int segments = std::min(kMaxDecodeSplits, (ctx + seg_min - 1) / seg_min);
  out.stages = stream_stages(kernel, D, G, one_byte);
  out.blocks_per_sm =
      std::max(1, blocks_per_sm(kernel, stream_shared_bytes(D, G, out.stages, one_byte)));
  const int resident = std::max(1, g_sms) * out.blocks_per_sm;
  out.parts = choose_parts(static_cast<long long>(num_queries) * num_kv_heads, segments,
                           out.segment_keys, resident);
  out.segments_per_part = (segments + out.parts - 1) / out.parts;
  return out;
}

void decode_attention_stream(const AttentionArgs& args, const FlatBatchView& batch,
                             const PagedKvView& kv, const std::int32_t* query_tokens,
                             int num_queries, int max_context, float* workspace,
                             cudaStream_t stream) {
  const int G = args.num_heads / kv.num_kv_heads, D = kv.head_dim;
  const DecodeStreamLaunch plan = decode_stream_launch(
      args.num_heads, kv.num_kv_heads, D, num_queries, max_context, kv.dtype, args.segment_keys);
  const int grid_splits = grid_decode_splits(std::max(max_context, 1));
  const int seg_min = stream_segment_keys(args.segment_keys);
  const bool release = release_early(kReleaseAttention);
  const std::size_t shared = stream_shared_bytes(D, G, plan.stages, kv_dtype_scaled(kv.dtype));
  WEFT_DISPATCH_KV(kv, {
    StreamKernel kernel = stream_kernel<T, KV>(D, G);
    launch(kernel, dim3(kv.num_kv_heads, num_queries, plan.parts), kThreads, shared, stream, args,
           batch, kv, query_tokens, workspace, grid_splits, plan.parts, plan.stages, seg_min,
           release);
    if (plan.parts > 1) {
      launch(stream_combine_kernel<T>, dim3(args.num_heads, num_queries), 128, 0, stream, args,
             batch, D, query_tokens, workspace, grid_splits, plan.parts, seg_min, release);
    }
  });
}

void decode_kv_read(const FlatBatchView& batch, const PagedKvView& kv,
                    const std::int32_t* query_tokens, int num_queries, unsigned* sink,
                    cudaStream_t stream) {
  if (num_queries == 0) return;
  launch(kv_read_kernel, dim3(kv.num_kv_heads, num_queries), kReadThreads, 0, stream, batch, kv,
         query_tokens, sink);
}

}  // namespace weft::cuda::detail
