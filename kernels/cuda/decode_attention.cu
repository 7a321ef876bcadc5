// The pipelined tensor-core decode attention (DecodeAttentionKernel::kPipelined; the top of
// paged_attention.hpp and docs/cuda.md, "Pipelined decode attention", describe it).
//
// One block per (query token, kv head, part): a part is a run of consecutive splits of the
// token's context (by default the same splits as the per-split kernel: multiples of 64
// positions, at most 32, cut from the token's own context; WEFT_DECODE_SPLIT_KEYS sets a
// larger minimum). The block walks the part's tiles of 64 keys through
// a ring of `stages` shared-memory buffers filled by cp.async, so while it computes one tile
// the next stages - 1 are in flight, and the page-table lookups of the tile after those are
// loaded in registers meanwhile. The per-tile arithmetic (mma.sync m16n8k16, q*scale and the
// softmax weights split into a 16-bit value and a 16-bit remainder, a softmax per warp over
// its 16 keys of each tile) and the merge of the 4 warps at the end of each split are the
// per-split kernel's, so each split's (o, m, l) is bitwise what that kernel writes.
//
// The splits are then folded in split order, a fixed sequence of roundings (fold_split):
//   M' = max(M, m_s), a = e^(M - M'), b = e^(m_s - M'), L = l_s b + L a, O = o_s b + O a,
// by the block itself when the part is the token's whole context (its output written at
// once, no workspace), or by fold_combine_kernel from the split records the parts write. The
// two are bitwise the same, so a token's result depends only on its context, not on how many
// parts the launch cut it into (which depends on the batch). It differs from the per-split
// kernel's combine (global max first) by rounding only.

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_attention_pipelined.hpp"
#include "kernels/cuda/decode_prologue.cuh"
#include "kernels/cuda/decode_tile.cuh"
#include "kernels/cuda/env_knob.hpp"
#include "kernels/cuda/tree_slots.cuh"

namespace weft::cuda::detail {
namespace {

constexpr int kThreads = 128, kWarps = kThreads / 32;
constexpr int kTileKeys = 64;  // keys per tile, 16 per warp (the per-split kernel's)
constexpr int kMaxGroup = 8;   // query heads per kv head

template <int D, int GM>
struct PipeLayout {
  static constexpr std::size_t tile_bytes = 2ull * kTileKeys * D * 2;  // K and V, 16-bit
  static constexpr std::size_t red_bytes = sizeof(float) * kWarps * GM * D;
  static std::size_t bytes(int stages) { return stages * tile_bytes + red_bytes; }
};

template <class T, int D, int GM>
__global__ void __launch_bounds__(kThreads, D >= 256 ? 1 : 2)
    decode_kernel_pipelined(AttentionArgs a, FlatBatchView b, PagedKvView kv,
                            const std::int32_t* query_tokens, float* workspace, int grid_splits,
                            int splits_per_part, int stages, int min_chunk) {
  constexpr int kVec = 8, L = D / kVec;  // 16-byte chunks per row
  constexpr int TP = kTileKeys, kWarpKeys = TP / kWarps;
  constexpr int KC = D / 32;  // k chunks of 32 elements (two m16n8k16 steps each)
  constexpr int VW = D / 16;  // 32-bit words of V per lane and key (= O^T row tiles)
  constexpr int kRowsPerPass = kThreads / L;  // rows one pass of the block's copy covers
  constexpr int CPT = TP / kRowsPerPass;      // rows each thread copies per tile
  constexpr int EPT = GM * D / kThreads;      // folded output elements per thread
  static_assert(kWarpKeys == 16, "one 16-key PV product per warp and tile");
  static_assert(kThreads % L == 0 && TP % kRowsPerPass == 0 && (GM * D) % kThreads == 0);
  extern __shared__ __align__(16) unsigned char pipe_smem[];
  uint4* tiles_s = reinterpret_cast<uint4*>(pipe_smem);  // [stage][K|V][TP][L], swizzled
  float* red_acc = reinterpret_cast<float*>(pipe_smem + stages * PipeLayout<D, GM>::tile_bytes);
  __shared__ float red_m[kWarps][GM], red_l[kWarps][GM], fac[kWarps][GM];
  __shared__ float fold_a[GM], fold_b[GM], fold_l[GM];
  __shared__ float rope_c[D / 2], rope_s[D / 2];

  grid_dependency_wait();
  const int qi = blockIdx.y;
  const TokenPieces ts = token_pieces(a, b, query_tokens, qi, min_chunk);
  const int t = ts.t, pos = ts.pos;
  const int s0 = blockIdx.z * splits_per_part;
  if (s0 >= ts.used) return;  // this token's context has fewer parts than the grid
  const int s1 = min(ts.used, s0 + splits_per_part);
  const bool whole = s0 == 0 && s1 == ts.used;  // folds every split, writes the output
  const int begin = ts.first + s0 * ts.size, end = min(pos + 1, ts.first + s1 * ts.size);
  const int tiles = (end - begin + TP - 1) / TP, split_tiles = ts.size / TP;
  const int kvh = blockIdx.x;
  const SlotTable table = slot_table(b, t);  // tree nodes: their path's slots
  const int G = a.num_heads / kv.num_kv_heads, NH = a.num_heads;
  const T* pool = static_cast<const T*>(kv.pool);
  const std::size_t v_shift = static_cast<std::size_t>(kv.num_kv_heads) * kv.page_size * D;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, tq = lane & 3;
  // This thread copies chunk `cpart` of rows crow + k * kRowsPerPass of every tile.
  const int crow = threadIdx.x / L, cpart = threadIdx.x % L;

  // Rows of the next tile to copy, in head_dim units from the pool's start (pages and layer
  // blocks are whole rows; 32 bits hold pools up to 2^32 rows): page-table lookups loaded a
  // tile ahead, so the copy of a tile never waits on them.
  unsigned off[CPT];
  auto offsets = [&](int tb) {
#pragma unroll
    for (int k = 0; k < CPT; ++k) {
      const int p = tb + crow + k * kRowsPerPass;
      off[k] = p < end ? static_cast<unsigned>(key_offset(kv, table, p, kvh) / D) : 0u;
    }
  };
  auto issue = [&](int tb, int stage) {
    uint4* ks = tiles_s + static_cast<std::size_t>(stage) * 2 * TP * L;
    uint4* vs = ks + TP * L;
#pragma unroll
    for (int k = 0; k < CPT; ++k) {
      const int r = crow + k * kRowsPerPass;
      const bool live = tb + r < end;
      const T* row = pool + static_cast<std::size_t>(off[k]) * D + cpart * kVec;
      const int at = r * L + (cpart ^ tile_swizzle(r));
      cp_async16(ks + at, row, live);
      cp_async16(vs + at, row + v_shift, live);
    }
  };
  // The first stages - 1 tiles in flight (a group per stage, empty past the last tile).
  for (int s = 0; s + 1 < stages; ++s) {
    if (s < tiles) {
      offsets(begin + s * TP);
      issue(begin + s * TP, s);
    }
    cp_async_commit();
  }
  if (stages - 1 < tiles) offsets(begin + (stages - 1) * TP);

  // Head g's q (as the per-split kernel: loads in flight before the rotary embedding's
  // barrier).
  float x[KC][8];
  load_query<D>(x, a, t, kvh, G, g, tq);

  // With a.rope_inv_freq, rope_store_kv's work for this token, as the per-split kernel does
  // it: q is rotated below, and the block whose part ends at the token's own position rotates
  // its key, rounds key and value to T and stores them into the page slot; they replace that
  // row of the staged tile once the tile has landed (the copy may have read the slot before
  // the store).
  const bool rope = a.rope_inv_freq != nullptr;
  const bool own_kv = rope && end == pos + 1;
  uint4 own[2] = {};
  rope_own_kv<T, D, kThreads>(a, b, kv, table, t, pos, kvh, rope, own_kv, rope_c, rope_s, own);

  // A fragments of q * scale (head g; rows 8-15 are zero), high parts and remainders.
  unsigned qh[KC][4], ql[KC][4];
  query_fragments<T>(x, rope && g < G, tq, rope_c, rope_s, a.scale, qh, ql);

  float acc[VW][4], m, l;  // head g's running max and this lane's part of its sum
  clear_split(acc, m, l);
  // The fold of the splits so far (whole blocks): elements threadIdx.x + k * kThreads of
  // [G][D], and on thread h < G head h's running max and sum.
  float fo[EPT];
#pragma unroll
  for (int k = 0; k < EPT; ++k)
    fo[k] = 0.0f;
  float fold_max = -INFINITY, fold_sum = 0.0f;

  for (int j = 0; j < tiles; ++j) {
    // Tile j has landed once at most stages - 2 later groups are pending.
    if (stages <= 2) {
      cp_async_wait<0>();
    } else if (stages == 3) {
      cp_async_wait<1>();
    } else {
      cp_async_wait<2>();
    }
    __syncthreads();  // tile j visible to all; every warp is done with tile j - 1's stage
    const int next = j + stages - 1;
    if (next < tiles) {
      issue(begin + next * TP, next % stages);
      if (next + 1 < tiles) offsets(begin + (next + 1) * TP);
    }
    cp_async_commit();
    const int stage = j % stages;
    const int tb = begin + j * TP;
    uint4* ks = tiles_s + static_cast<std::size_t>(stage) * 2 * TP * L;
    const uint4* vs = ks + TP * L;
    if (own_kv && pos - tb < TP) {  // the tile holding the token's own key
      const int rr = pos - tb;
      patch_own_row<L, TP>(ks + rr * L, tile_swizzle(rr), own);
      __syncthreads();
    }
    const int i0 = warp * kWarpKeys, k0 = tb + i0;
    if (k0 < end) {
      tile_attend16<T, L, true>(ks, vs, i0, k0, end, g, tq, qh, ql, m, l, acc);
    }
    if ((j + 1) % split_tiles != 0 && j + 1 != tiles) continue;

    // The split ends with this tile: merge the warps in order (the per-split kernel's
    // arithmetic), then fold the split in or write its record.
    const int split = s0 + j / split_tiles;
    merge_split<D, GM>(G, warp, g, tq, m, l, acc, red_acc, red_m, red_l, fac, fold_a, fold_b,
                       fold_l, whole, fold_max, fold_sum, fo, workspace, qi, NH, kvh, grid_splits,
                       split);
    clear_split(acc, m, l);
  }
  cp_async_wait<0>();  // no copy outlives the block (the groups past the last tile are empty)

  if (whole) write_folded<T, D, EPT, kThreads>(a, t, kvh, G, fo, fold_l);
}

// Folds the split records of the tokens whose context was cut into more than one part, in
// split order, bitwise as a whole block folds them; one block per (head, query).
template <class T>
__global__ void fold_combine_kernel(AttentionArgs a, FlatBatchView b, int head_dim,
                                    const std::int32_t* query_tokens, const float* workspace,
                                    int grid_splits, int splits_per_part, int min_chunk) {
  grid_dependency_wait();
  const int h = blockIdx.x, qi = blockIdx.y, D = head_dim;
  const TokenPieces ts = token_pieces(a, b, query_tokens, qi, min_chunk);
  if (ts.used <= splits_per_part) return;  // one part: its block wrote the output
  const float* recs =
      workspace + (static_cast<std::size_t>(qi) * a.num_heads + h) * grid_splits * (D + 2);
  fold_records<T>(a, ts.t, h, D, ts.used, recs);
}

using PipeKernel = void (*)(AttentionArgs, FlatBatchView, PagedKvView, const std::int32_t*, float*,
                            int, int, int, int);

template <class T, int D>
PipeKernel pipe_kernel_for_group(int G) {
  if (G <= 4) return decode_kernel_pipelined<T, D, 4>;
  return decode_kernel_pipelined<T, D, kMaxGroup>;
}

template <class T>
PipeKernel pipe_kernel(int D, int G) {
  if (G < 1 || G > kMaxGroup) return nullptr;
  switch (D) {
    case 64:
      return pipe_kernel_for_group<T, 64>(G);
    case 128:
      return pipe_kernel_for_group<T, 128>(G);
    case 256:
      return pipe_kernel_for_group<T, 256>(G);
    default:
      return nullptr;
  }
}

std::size_t pipe_shared_bytes(int D, int G, int stages) {
  const bool small = G <= 4;
  switch (D) {
    case 64:
      return small ? PipeLayout<64, 4>::bytes(stages) : PipeLayout<64, kMaxGroup>::bytes(stages);
    case 128:
      return small ? PipeLayout<128, 4>::bytes(stages) : PipeLayout<128, kMaxGroup>::bytes(stages);
    default:
      return small ? PipeLayout<256, 4>::bytes(stages) : PipeLayout<256, kMaxGroup>::bytes(stages);
  }
}

std::atomic<int> g_parts{-1};  // decode_attention_parts(); -1: not read from the environment yet
int g_optin_bytes = 0;         // shared memory a block may opt into (prepare_decode_pipelined)
int g_sm_bytes = 0;            // shared memory per SM

// Stages of the ring: WEFT_DECODE_STAGES (2-4), else 3 where two blocks of 3 stages fit an
// SM (head_dim 64, and 128 with up to 4 query heads per kv head), else 2; fewer where the
// shared memory a block may use is short. 4 KB per block for the kernel's static shared
// memory (at most 1.5 KB) and the 1 KB the system reserves.
int pipe_stages(int D, int G) {
  static const int env = env_int("WEFT_DECODE_STAGES", 0);
  constexpr std::size_t kExtra = 4096;
  int stages = env >= 2 && env <= 4 ? env : 3;
  if (env < 2 || env > 4) {
    if (g_sm_bytes > 0 &&
        2 * (pipe_shared_bytes(D, G, 3) + kExtra) > static_cast<std::size_t>(g_sm_bytes))
      stages = 2;
  }
  while (stages > 2 && g_optin_bytes > 0 &&
         pipe_shared_bytes(D, G, stages) + kExtra > static_cast<std::size_t>(g_optin_bytes))
    --stages;
  return stages;
}

// Positions per split at least (WEFT_DECODE_SPLIT_KEYS: a multiple of 64 up to 4096; 64, the
// per-split kernel's splits, by default). Read once: it sets the kernel's numerics (results
// stay batch invariant for any value) and its launches' shape.
int pipe_min_split() {
  static const int keys = [] {
    const int v = env_int("WEFT_DECODE_SPLIT_KEYS", kDecodeSplitQuantum);
    if (v < kDecodeSplitQuantum || v > 4096 || v % kDecodeSplitQuantum != 0) {
      std::fprintf(stderr,
                   "weft: ignoring WEFT_DECODE_SPLIT_KEYS=%d (expected a multiple of 64 from 64 "
                   "to 4096)\n",
                   v);
      return kDecodeSplitQuantum;
    }
    return v;
  }();
  return keys;
}

// Blocks of `kernel` resident at once on the device (SMs x blocks per SM), cached.
int resident_blocks(PipeKernel kernel, std::size_t shared) {
  static std::mutex mu;
  static std::map<std::pair<PipeKernel, std::size_t>, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(kernel, shared);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  int device = 0, sms = 0, per_sm = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads,
                                                    static_cast<int>(shared)) != cudaSuccess) {
    cudaGetLastError();
    sms = 132;
    per_sm = 2;
  }
  const int blocks = std::max(1, sms * std::max(1, per_sm));
  cache.emplace(key, blocks);
  return blocks;
}

// Splits per part for `items` (query, kv head) pairs whose contexts have up to `splits`
// splits of `split_tiles` tiles: the fewest parts (fewer combines, fewer per-block setups)
// unless more parts fill the device's resident blocks better. Cost in tile times of one
// block: waves x (tiles per part + 1 for the block's setup), plus 2 for the combine kernel.
int choose_splits_per_part(long long items, int splits, int split_tiles, int resident) {
  const int forced = decode_attention_parts();
  if (forced > 0) {
    const int parts = std::min(forced, splits);
    return (splits + parts - 1) / parts;
  }
  // WEFT_DECODE_PART_TILES: at most this many tiles per part (0: no bound). The cost below
  // assumes every context is as long as the longest; in a batch of mostly short contexts the
  // few long ones' blocks finish last, and a bound on their length bounds that tail.
  static const int max_tiles = env_int("WEFT_DECODE_PART_TILES", 0);
  int best_spp = 1;
  double best_cost = -1;
  for (int spp = splits; spp >= 1; --spp) {
    if (max_tiles > 0 && spp > 1 && spp * split_tiles > max_tiles) continue;
    const int parts = (splits + spp - 1) / spp;
    const long long blocks = items * parts;
    const double waves = static_cast<double>((blocks + resident - 1) / resident);
    const double cost = waves * (spp * split_tiles + 1) + (parts > 1 ? 2 : 0);
    if (best_cost < 0 || cost < best_cost) {
      best_cost = cost;
      best_spp = spp;
    }
  }
  return best_spp;
}

}  // namespace

bool decode_pipelined_supports(int num_heads, int num_kv_heads, int head_dim, KvDtype dtype) {
  if (kv_dtype_scaled(dtype) || num_kv_heads <= 0 || num_heads % num_kv_heads != 0) return false;
  return pipe_kernel<__nv_bfloat16>(head_dim, num_heads / num_kv_heads) != nullptr;
}

void prepare_decode_pipelined(int bytes) {
  g_optin_bytes = bytes;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&g_sm_bytes, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device) !=
          cudaSuccess) {
    cudaGetLastError();
    g_sm_bytes = 0;
  }
  for (int D : {64, 128, 256}) {
    for (int G : {4, kMaxGroup}) {
      for (PipeKernel k : {pipe_kernel<__nv_bfloat16>(D, G), pipe_kernel<__half>(D, G)}) {
        cudaFuncAttributes attr{};
        if (cudaFuncGetAttributes(&attr, k) != cudaSuccess) {
          cudaGetLastError();
          continue;
        }
        cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             bytes - static_cast<int>(attr.sharedSizeBytes));
        // Fills the occupancy cache now, outside any stream capture.
        resident_blocks(k, pipe_shared_bytes(D, G, pipe_stages(D, G)));
      }
    }
  }
}

void decode_attention_pipelined(const AttentionArgs& args, const FlatBatchView& batch,
                                const PagedKvView& kv, const std::int32_t* query_tokens,
                                int num_queries, int max_context, float* workspace,
                                cudaStream_t stream) {
  const int G = args.num_heads / kv.num_kv_heads, D = kv.head_dim;
  const int min_chunk = pipe_min_split();
  const int splits = std::min(kMaxDecodeSplits, (max_context + min_chunk - 1) / min_chunk);
  const int split_tiles = piece_positions(std::max(max_context, 1), min_chunk) / kTileKeys;
  const int stages = pipe_stages(D, G);
  const std::size_t shared = pipe_shared_bytes(D, G, stages);
  WEFT_DISPATCH_PRECISION(kv.precision, {
    PipeKernel kernel = pipe_kernel<T>(D, G);
    const int spp = choose_splits_per_part(static_cast<long long>(num_queries) * kv.num_kv_heads,
                                           splits, split_tiles, resident_blocks(kernel, shared));
    const int parts = (splits + spp - 1) / spp;
    launch(kernel, dim3(kv.num_kv_heads, num_queries, parts), kThreads, shared, stream, args, batch,
           kv, query_tokens, workspace, splits, spp, stages, min_chunk);
    if (parts > 1) {
      launch(fold_combine_kernel<T>, dim3(args.num_heads, num_queries), 128, 0, stream, args, batch,
             D, query_tokens, workspace, splits, spp, min_chunk);
    }
  });
}

}  // namespace weft::cuda::detail

namespace weft::cuda {

int decode_attention_parts() {
  int parts = detail::g_parts.load(std::memory_order_relaxed);
  if (parts < 0) {
    parts = detail::env_int("WEFT_DECODE_PARTS", 0);
    int expected = -1;
    detail::g_parts.compare_exchange_strong(expected, parts);
    parts = detail::g_parts.load(std::memory_order_relaxed);
  }
  return parts;
}

void set_decode_attention_parts(int parts) {
  detail::g_parts.store(std::max(0, parts), std::memory_order_relaxed);
}

}  // namespace weft::cuda
