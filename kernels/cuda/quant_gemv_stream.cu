// The stream kernel of quant_gemv.hpp (QuantGemvKernel::kStream): the tensor-core arithmetic of
// quant_gemv_mma.cu (mma.sync.m16n8k16, codes as exact 16-bit numbers, the block-diagonal B,
// fp32 sums per block header) in a schedule made for reading HBM at its full rate at 1 to 8
// tokens, for the formats of quant_gemv_stream_supported.
//
// Why another schedule: the lanes and mma kernels give each warp one burst of loads (a tile's
// code words), then compute, then exit; on the H100 their time was close to the memory time
// plus the compute time (lanes: 1.79 TB/s on 14336x4096, the 4096-wide products 9-12 us), and
// thread blocks of equal length came in waves that left multiprocessors idle at the end.
// Here:
// - Persistent thread blocks: min(tiles, what the GPU holds at once: 3 per multiprocessor at
//   1-2 tokens, 2 at more) blocks of 8 warps; block b takes the 16-row tiles b, b + grid,
//   b + 2 grid, ... one after the other (with the multiprocessors served in turn, every one
//   gets the same number of tiles, +-1).
// - A tile's columns (chunks of 4 groups, 128 weights for 1-weight units) are split over the 8
//   warps in equal slices; a warp walks the sequence (its tile 0's slice, its tile 1's slice,
//   ...) through a ring of kRing chunk slots in shared memory, filled by cp.async (no
//   registers held): while it computes one chunk, the next kRing - 1 are on their way (q4: 5
//   chunks, 6.25 KB a warp, 150 KB an SM at one token pair), across tile ends as well. Each
//   lane reads back only what it copied itself, so a cp.async.wait_group per chunk suffices.
// - At a tile's end the warps' sums meet in shared memory (double buffered: one barrier per
//   tile) and are added in warp order, so results do not depend on timing, and not on the
//   token count either: a token's sums are the same at 1 to 8 tokens (what batch-invariant
//   decode needs), as with the mma kernel.
// - Programmatic dependent launch (common.cuh): the ring's first copies start before the
//   kernel waits for the one before it; x is read after.
// - The gated MLP's gate_up (act >= 0): a block's units are tile pairs (gate tile i, then up
//   tile i + rows / 32); the gate sums wait in a register of the thread that adds them until
//   the up sums come, then act(gate) * up is written as 16 bits, what mlp_activation makes of
//   quant_gemv's rows.
//
// Per chunk a lane reads its two rows' code words and headers from its slot and forms the A
// fragments once (shared by the token pairs), then per token pair loads its x (8 of the 32 lanes,
// 64 bytes each, from L1) and runs two mmas per 16 columns (the products and sum(x),
// quant_gemv_mma.cu's scheme): about 2.6 instructions per q4 weight at one token.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <type_traits>

#include "kernels/cuda/activation.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/quant_gemv.cuh"
#include "kernels/cuda/quant_gemv.hpp"
#include "kernels/cuda/quant_gemv_mma.cuh"

namespace weft::cuda {
namespace {

using namespace quant_device;

constexpr int kWarps = 8;
constexpr int kTileRows = 16;
// Thread blocks an SM holds: 3 at one token pair (at most 80 registers a thread), 2 with more
// pairs (their x and sums take registers); the grid is what the device holds at once
// (cudaOccupancyMaxActiveBlocksPerMultiprocessor), so no block waits for a second wave.
template <int kPairs>
__host__ __device__ constexpr int blocks_per_sm() {
  return kPairs == 1 ? 3 : 2;
}

// A ring slot (one chunk of a warp) in shared memory, in 16-byte units: the two rows' code
// words, piece by piece (each piece 16 bytes a lane, lanes side by side: conflict-free 16-byte
// accesses), then the two rows' headers (4 bytes a lane).
template <int kBits>
struct Slot {
  static constexpr int kPieces = kBits / 4;  // q4: 1, q8: 2 (16-byte pieces of a group)
  static constexpr int kCodeUnits = 2 * kPieces * 32;
  static constexpr int kUnits = kCodeUnits + 2 * 32 / 4;
  // Chunks in the ring: about 1.25 KB (q4) or 2.25 KB (q8) a chunk and warp; 6 or 3 slots, so
  // 5 or 2 chunks stay in flight while the warp computes one (24 warps an SM at one token pair:
  // 150 or 108 KB in flight; 3 blocks' rings take 184 or 166 KB of shared memory).
  static constexpr int kRing = kBits <= 4 ? 6 : 3;
  static constexpr std::size_t kBlockBytes = std::size_t{16} * kUnits * kRing * kWarps;
};

__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Copies of 16 or 4 bytes from global to shared memory that bypass registers (asking L2 for the
// whole 128-byte line: the warp reads the rest of it next); with live == false the destination
// is zero-filled and nothing is read. The "memory" clobber keeps the compiler from moving the
// thread's earlier reads of the slot being refilled after the copy; the copy writes shared
// memory only once its global read returns, long after those reads, which the same thread
// issued before it.
__device__ __forceinline__ void copy16(unsigned dst, const void* src, bool live) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
               "r"(live ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void copy4(unsigned dst, const void* src, bool live) {
  asm volatile("cp.async.ca.shared.global.L2::128B [%0], [%1], 4, %2;" ::"r"(dst), "l"(src),
               "r"(live ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void copy_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void copy_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

// Starts the copies of one chunk (group `group` of the lane's rows a and b: their code words
// and headers start at codes + code_a, codes + code_b, headers + head_a, headers + head_b) into
// `slot` (this warp's slot) and commits them as one group; zeros for a chunk past the warp's
// slice or a group past the row's end.
template <int kBits, int kGroupWeights, int kBlock>
__device__ __forceinline__ void copy_chunk(const unsigned* __restrict__ codes,
                                           const unsigned* __restrict__ headers, unsigned code_a,
                                           unsigned code_b, unsigned head_a, unsigned head_b,
                                           int groups, int group, bool live, unsigned slot,
                                           int lane) {
  using S = Slot<kBits>;
  live = live && group < groups;
  const int gg = live ? group : 0;  // an address inside the matrix even when nothing is read
  const int tile = gg >> 5, n = min(32, groups - tile * 32);
  const unsigned at = tile * 32 * kBits + (gg & 31) * 4;  // words into the row
  const unsigned block = gg * kGroupWeights / kBlock;
#pragma unroll
  for (int piece = 0; piece < S::kPieces; ++piece) {
    const unsigned in_row = at + static_cast<unsigned>(n * 4 * piece);
    copy16(slot + 16u * static_cast<unsigned>(piece * 32 + lane), codes + (code_a + in_row), live);
    copy16(slot + 16u * static_cast<unsigned>((S::kPieces + piece) * 32 + lane),
           codes + (code_b + in_row), live);
  }
  copy4(slot + 16u * S::kCodeUnits + 4u * static_cast<unsigned>(lane), headers + (head_a + block),
        live);
  copy4(slot + 16u * S::kCodeUnits + 4u * static_cast<unsigned>(32 + lane),
        headers + (head_b + block), live);
  copy_commit();
}

template <class T, int kBits, int kUnitW, int kBlock, int kPairs>
__global__ void __launch_bounds__(kWarps * 32, blocks_per_sm<kPairs>())
    quant_gemv_stream_kernel(const T* __restrict__ x, int tokens,
                             const unsigned* __restrict__ codes,
                             const unsigned* __restrict__ headers, int out, int in,
                             float* __restrict__ y, int ldy, int act, T* __restrict__ act_out) {
  using G = Geometry<kBits, kUnitW, kBlock>;
  using S = Slot<kBits>;
  static_assert(kUnitW == 1 && kBits % 4 == 0 && G::kSegments == 1,
                "the stream kernel reads 16-byte pieces and one header per group");
  constexpr int kGroupWeights = G::kGroupWeights;
  constexpr int kXWords = kGroupWeights / 2;  // x of a group as 16-bit pairs
  constexpr int kSteps = kGroupWeights / 4;   // mmas per group (2 pairs of each row)
  constexpr int kRing = S::kRing;
  const T* tag = nullptr;
  const unsigned ones[4] = {Bits16<T>::kOne, Bits16<T>::kOne, Bits16<T>::kOne, Bits16<T>::kOne};

  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int g = lane >> 2, t = lane & 3;
  const int groups = in / kGroupWeights;
  const int chunks = (groups + 3) / 4;
  // Chunk slots per warp and tile: the same for every warp, so tile ends (and their barriers)
  // come at the same step of every warp; a warp's last slots may be empty.
  const int per_warp = (chunks + kWarps - 1) / kWarps;
  const int c_begin = warp * per_warp;
  const int c_count = max(0, min(per_warp, chunks - c_begin));
  const std::size_t row_words = (static_cast<std::size_t>(groups) * kBits + 3) / 4 * 4;
  const int row_blocks = in / kBlock;
  const bool x_lane = (g >> 1) == t;  // supplies B column g (group t, token g % 2 of a pair)

  // The block's tiles: plain, tiles b, b + grid, ...; gated, units (tile pairs) b, b + grid, ...
  // each as its gate tile then its up tile.
  const int grid = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
  const int tiles = (out + kTileRows - 1) / kTileRows;
  const int half_tiles = out / (2 * kTileRows);
  const int units = act < 0 ? tiles : half_tiles;
  const int my_units = b < units ? (units - 1 - b) / grid + 1 : 0;
  const int my_tiles = act < 0 ? my_units : 2 * my_units;
  const int total = my_tiles * per_warp;  // the warp's sequence of chunk slots
  auto tile_row0 = [&](int k) {
    const int tile = act < 0 ? b + k * grid : b + (k >> 1) * grid + (k & 1) * half_tiles;
    return tile * kTileRows;
  };

  extern __shared__ uint4 ring[];
  const unsigned my_ring =
      shared_address(ring + static_cast<std::size_t>(warp) * kRing * S::kUnits);
  const uint4* my_slots = ring + static_cast<std::size_t>(warp) * kRing * S::kUnits;

  // The copy pointer: tile lk of the block, chunk slot lc of the warp's slice.
  int lk = 0, lc = 0;
  // Where tile lk's rows of this lane start, in words from codes and headers (the last row for
  // rows past the end; 32 bits: launch_stream checks the matrix fits).
  unsigned code_a = 0, code_b = 0, head_a = 0, head_b = 0;
  auto set_rows = [&](int k) {
    const int row0 = tile_row0(k);
    const auto ra = static_cast<unsigned>(min(row0 + g, out - 1));
    const auto rb = static_cast<unsigned>(min(row0 + g + 8, out - 1));
    code_a = ra * static_cast<unsigned>(row_words);
    code_b = rb * static_cast<unsigned>(row_words);
    head_a = ra * static_cast<unsigned>(row_blocks);
    head_b = rb * static_cast<unsigned>(row_blocks);
  };
  auto copy_next = [&](int s) {
    copy_chunk<kBits, kGroupWeights, kBlock>(
        codes, headers, code_a, code_b, head_a, head_b, groups, (c_begin + lc) * 4 + t,
        lk < my_tiles && lc < c_count, my_ring + 16u * static_cast<unsigned>(s * S::kUnits), lane);
    if (++lc == per_warp) {
      lc = 0;
      if (++lk < my_tiles) set_rows(lk);
    }
  };
  if (my_tiles > 0) set_rows(0);
#pragma unroll
  for (int s = 0; s < kRing; ++s)
    copy_next(s);
  // Weights are constant: asked for before the kernel before has finished (programmatic
  // dependent launch); x, which that kernel writes, after it.
  detail::grid_dependency_wait();

  __shared__ float partial[2][kWarps][kTileRows][2 * kPairs];
  float acc[kPairs][4];
#pragma unroll
  for (int p = 0; p < kPairs; ++p) {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      acc[p][e] = 0.0f;
  }
  int ck = 0, cc = 0, parity = 0;
  float held = 0.0f;  // gated: this thread's gate sum, until its up sum comes

  for (int f0 = 0; f0 < total; f0 += kRing) {
#pragma unroll
    for (int s = 0; s < kRing; ++s) {
      if (f0 + s >= total) break;  // the same for the whole block
      const int group = (c_begin + cc) * 4 + t;
      const bool live = cc < c_count && group < groups;
      // This chunk's copies are done once at most kRing - 1 later groups are pending; each
      // lane reads only what it copied itself.
      copy_wait<kRing - 1>();
      const uint4* slot = my_slots + s * S::kUnits;
      unsigned wa[kBits], wb[kBits];
#pragma unroll
      for (int piece = 0; piece < S::kPieces; ++piece) {
        const uint4 va = slot[piece * 32 + lane], vb = slot[(S::kPieces + piece) * 32 + lane];
        wa[4 * piece] = va.x;
        wa[4 * piece + 1] = va.y;
        wa[4 * piece + 2] = va.z;
        wa[4 * piece + 3] = va.w;
        wb[4 * piece] = vb.x;
        wb[4 * piece + 1] = vb.y;
        wb[4 * piece + 2] = vb.z;
        wb[4 * piece + 3] = vb.w;
      }
      const auto* hs = reinterpret_cast<const unsigned*>(slot + S::kCodeUnits);
      const float2 fa = header_floats(hs[lane]), fb = header_floats(hs[32 + lane]);
      // The A fragments of the chunk's steps (rows g, g + 8; pairs j and j + 1 of the group):
      // formed once for all token pairs (the compiler does not share inline PTX between them).
      unsigned afrag[kSteps][4];
#pragma unroll
      for (int k = 0; k < kSteps; ++k) {
        afrag[k][0] = code_pair<T, kBits, kUnitW>(wa, 2 * k);
        afrag[k][1] = code_pair<T, kBits, kUnitW>(wb, 2 * k);
        afrag[k][2] = code_pair<T, kBits, kUnitW>(wa, 2 * k + 1);
        afrag[k][3] = code_pair<T, kBits, kUnitW>(wb, 2 * k + 1);
      }
#pragma unroll
      for (int p = 0; p < kPairs; ++p) {
        const int token = 2 * p + (g & 1);
        unsigned xw[kXWords];
        load_x_words<kGroupWeights>(xw, x, token, in, group, x_lane && live && token < tokens);
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sx[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < kSteps; ++k) {
          const unsigned b0 = x_pair<kBits, kUnitW>(xw, 2 * k);
          const unsigned b1 = x_pair<kBits, kUnitW>(xw, 2 * k + 1);
          mma(d, afrag[k], b0, b1, tag);
          mma(sx, ones, b0, b1, tag);
        }
        // d: rows g, g + 8 x tokens 2p, 2p + 1 of group t; sx: sum(x) of it.
        add_scaled(acc[p], fa, fb, d, sx);
      }
      // The slot's words are read: refill it with the chunk kRing ahead.
      copy_next(s);
      if (++cc < per_warp) continue;
      // The end of tile ck: over the four lanes of a row (their groups), then over the warps
      // in order.
      cc = 0;
#pragma unroll
      for (int p = 0; p < kPairs; ++p) {
        quad_sum_store(acc[p], g, t, p, partial[parity][warp]);
#pragma unroll
        for (int e = 0; e < 4; ++e)
          acc[p][e] = 0.0f;
      }
      __syncthreads();
      // Thread i: row i % 16, token i / 16 (consecutive threads, consecutive rows of y).
      const int i = static_cast<int>(threadIdx.x);
      if (i < kTileRows * 2 * kPairs) {
        const int r = i % kTileRows, token = i / kTileRows;
        float v = 0.0f;
#pragma unroll
        for (int k = 0; k < kWarps; ++k)
          v += partial[parity][k][r][token];
        if (act < 0) {
          const int row = tile_row0(ck) + r;
          if (row < out && token < tokens) y[static_cast<std::size_t>(token) * ldy + row] = v;
        } else if ((ck & 1) == 0) {
          held = v;
        } else if (token < tokens) {
          const int width = out / 2;
          const int row = tile_row0(ck - 1) + r;  // the gate tile's row: the output row
          act_out[static_cast<std::size_t>(token) * width + row] =
              detail::from_float<T>(detail::activate(static_cast<ActivationKind>(act), held) * v);
        }
      }
      parity ^= 1;
      ++ck;
    }
  }
  copy_wait<0>();  // the copies past the end (zero fills) land before the block exits
}

// WEFT_QUANT_STREAM_BLOCKS=1|2|3: at most that many blocks an SM (a smaller grid), for
// measurements; unset or another value: what the device holds.
int blocks_cap() {
  static const int cap = [] {
    const char* v = std::getenv("WEFT_QUANT_STREAM_BLOCKS");
    const int n = v != nullptr ? std::atoi(v) : 0;
    return n >= 1 && n <= 3 ? n : 1 << 20;
  }();
  return cap;
}

template <class T>
constexpr Precision precision_of() {
  return std::is_same_v<T, __nv_bfloat16> ? Precision::kBF16 : Precision::kF16;
}

// Per device (a process may drive several GPUs): its multiprocessors.
constexpr int kMaxDevices = 64;
int multiprocessors(int device) {
  static std::atomic<int> cache[kMaxDevices] = {};
  if (device >= 0 && device < kMaxDevices) {
    if (const int n = cache[device].load(std::memory_order_relaxed); n > 0) return n;
  }
  int n = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || n <= 0) {
    cudaGetLastError();
    n = 132;
  }
  if (device >= 0 && device < kMaxDevices) cache[device].store(n, std::memory_order_relaxed);
  return n;
}

template <class T, int kBits, int kUnitW, int kBlock, int kPairs>
void launch_stream(const void* x, int tokens, const QuantMatrixView& w, float* y, int ldy, int act,
                   void* act_out, cudaStream_t stream) {
  const QuantMatrixLayout layout = quant_matrix_layout(w.format, static_cast<std::size_t>(w.rows),
                                                       static_cast<std::size_t>(w.cols));
  const auto* base = static_cast<const unsigned char*>(w.data);
  const int tiles = (w.rows + kTileRows - 1) / kTileRows;
  const int units = act < 0 ? tiles : w.rows / (2 * kTileRows);
  if (units <= 0) return;
  if (layout.code_bytes() / 4 > 0xffffffffu) {
    // Row offsets past 32 bits (a matrix over 16 GB): the mma kernel, same arithmetic.
    if (act < 0) {
      quant_gemv_mma(x, tokens, w, y, ldy, precision_of<T>(), stream);
    } else {
      quant_gemv_mma_gated(static_cast<ActivationKind>(act), x, tokens, w, act_out,
                           precision_of<T>(), stream);
    }
    return;
  }
  auto* kernel = quant_gemv_stream_kernel<T, kBits, kUnitW, kBlock, kPairs>;
  constexpr std::size_t kShared = Slot<kBits>::kBlockBytes;
  // More than the default 48 KB of dynamic shared memory is an opt-in, once per kernel and
  // device; then the blocks an SM holds with it (if either fails, so does the launch, which
  // the caller's cudaGetLastError reports).
  static std::atomic<int> resident[kMaxDevices] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) cudaGetLastError();
  int per_sm =
      device >= 0 && device < kMaxDevices ? resident[device].load(std::memory_order_relaxed) : 0;
  if (per_sm == 0) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(kShared));
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * 32, kShared) !=
        cudaSuccess) {
      cudaGetLastError();
      per_sm = 0;
    }
    per_sm = std::max(per_sm, 1);
    if (device >= 0 && device < kMaxDevices)
      resident[device].store(per_sm, std::memory_order_relaxed);
  }
  const int grid = std::min(units, std::min(per_sm, blocks_cap()) * multiprocessors(device));
  detail::launch(kernel, dim3(grid), dim3(kWarps * 32), kShared, stream, static_cast<const T*>(x),
                 tokens, reinterpret_cast<const unsigned*>(base),
                 reinterpret_cast<const unsigned*>(base + layout.header_offset()), w.rows, w.cols,
                 y, ldy, act, static_cast<T*>(act_out));
}

template <class T, int kBits, int kUnitW, int kBlock>
void dispatch_pairs(const void* x, int tokens, const QuantMatrixView& w, float* y, int ldy, int act,
                    void* act_out, cudaStream_t stream) {
  if (tokens <= 2) {
    launch_stream<T, kBits, kUnitW, kBlock, 1>(x, tokens, w, y, ldy, act, act_out, stream);
  } else if (tokens <= 4) {
    launch_stream<T, kBits, kUnitW, kBlock, 2>(x, tokens, w, y, ldy, act, act_out, stream);
  } else {
    launch_stream<T, kBits, kUnitW, kBlock, 4>(x, tokens, w, y, ldy, act, act_out, stream);
  }
}

}  // namespace

void quant_gemv_stream(const void* x, int tokens, const QuantMatrixView& w, float* y, int ldy,
                       int act, void* act_out, Precision precision, cudaStream_t stream) {
  if (tokens <= 0 || w.rows <= 0) return;
  WEFT_DISPATCH_PRECISION(precision, {
    switch (w.format) {
      case QuantGemvFormat::kQ4B32:
        dispatch_pairs<T, 4, 1, 32>(x, tokens, w, y, ldy, act, act_out, stream);
        break;
      case QuantGemvFormat::kQ4B64:
        dispatch_pairs<T, 4, 1, 64>(x, tokens, w, y, ldy, act, act_out, stream);
        break;
      case QuantGemvFormat::kQ8B32:
        dispatch_pairs<T, 8, 1, 32>(x, tokens, w, y, ldy, act, act_out, stream);
        break;
      case QuantGemvFormat::kQ8B64:
        dispatch_pairs<T, 8, 1, 64>(x, tokens, w, y, ldy, act, act_out, stream);
        break;
      default:  // quant_gemv_resolve sends the other formats elsewhere; called anyway:
        if (act < 0) {
          quant_gemv(QuantGemvKernel::kLanes, x, tokens, w, y, ldy, precision, stream);
        } else {
          quant_gemv_mma_gated(static_cast<ActivationKind>(act), x, tokens, w, act_out, precision,
                               stream);
        }
        break;
    }
  });
}

}  // namespace weft::cuda
