// The tensor-core product of quant_gemv.hpp (QuantGemvKernel::kMma), for every block format, at
// 1 to 8 tokens, reading the GPU layout of quant_layout.hpp as it is.
//
// Why: the CUDA-core kernel (quant_gemv.cu) spends about 3 to 4 instructions per weight and
// token (code to float, subtraction, fma, plus x's unpacking), close to what an H100 can issue
// while HBM delivers q4 weights at 3 TB/s. Here a warp-wide mma.sync.m16n8k16 does 2048
// multiply-adds in one instruction, and a weight costs about 1.5 instructions (q4: a shift,
// a LOP3 and half an fma.bf16x2 per code, then the mma).
//
// Work split: a thread block of kWarps warps takes tiles_per_block tiles of 16 output rows;
// each tile's columns are split between kWarps / tiles_per_block warps (more tiles per block,
// longer loops, for matrices with many rows; one tile per block, split 8 ways, for the small
// 4096-row products so that every SM gets work). A warp walks its columns in chunks of 4
// groups (a group: the 32 units of quant_layout.hpp, 32 weights or 64 for Q3H).
//
// Fragments (m16n8k16, A 16x16 row-major, B 16x8, C/D 16x8; lane = 4 * g + t): lane (g, t)
// holds A rows g and g + 8 at k slots {2t, 2t + 1, 2t + 8, 2t + 9}, B column g at the same
// slots, and D rows g and g + 8 at columns 2t, 2t + 1. Since k is summed over, any assignment
// of columns to slots works if A and B use the same one. Here lane t's slots always come from
// group 4c + t of the chunk, which the lane loads itself (rows g and g + 8: for q4, 16 bytes
// each; the four lanes of a row read 64 contiguous bytes). Successive mmas walk through the
// group, two pairs of weights per row each.
//
// The B trick: block headers apply per (row, group), but one mma sums over the 4 groups of
// its slots. So B is block-diagonal: column n = 2 * j + i holds token i (of the token pair)
// at the slots of lane j's group, zero elsewhere. Then D[row][2t + i] is sum(q * x) over
// group t only, for token i: exactly the lane that holds group t's header reads it. A second
// mma with A = ones gives sum(x) over the same slots. After a header segment (a block, or the
// group when blocks are longer): acc += scale * D + min * sum(x), in fp32, as the CPU does.
// Tokens come in pairs: 3-4 tokens run two pairs of mmas, 5-8 four (A built per pair).
//
// Codes become exact 16-bit numbers without conversions: the code is ORed into the mantissa of
// 128 (bf16; 1024 for fp16) and that number is subtracted with one fma.bf16x2 per two codes.
// q4 takes nibbles j and j + 4 of a word with one LOP3 (a pair at bits 4j and 16 + 4j), q2
// crumbs j and j + 8, fp16's q8 two bytes with one PRMT; the others pick codes one by one.
// bf16 has 8 significant bits, so q8 codes (up to 255) cannot ride on 128: they go through
// fp32 (2^23 + q) and one cvt.rn.bf16x2.f32 per pair. x is permuted the same way (PRMT).
//
// The gated MLP's gate_up product can end in its activation (quant_gemv_gated): a block then
// takes gate tile b and up tile b + rows / 32 (same rows of the two halves) and writes
// act(gate) * up as 16 bits, the sums the plain product with 2 tiles per block would write, so
// the result is what the separate activation kernel makes of them, one launch and the fp32
// round trip fewer.
//
// A warp with more than one pass over its columns (the head, gate_up, down) asks L2 for the
// next pass's code words and headers (prefetch.global.L2) as it starts a pass, so more bytes
// are on their way than its registers hold.
//
// Launched with programmatic dependent launch (common.cuh's launch; WEFT_PDL=0 turns it off):
// a warp loads its first code words and headers while the kernel before it on the stream
// finishes, and waits for it only before reading x.
//
// Sums: per lane in fp32 (the mma's fp32 accumulation within a segment), then over the four
// lanes of a row in a fixed order, then over the warps of a tile in a fixed order, so results
// do not depend on timing.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
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

// Chunks (4 groups each) whose code words a warp loads before it computes: about 32 registers
// of codes (2 rows) at 1-2 tokens, fewer with more tokens (whose x takes registers too).
template <int kBits, int kPairs>
__host__ __device__ constexpr int unroll_chunks() {
  const int budget = 16 / kPairs;
  return budget / kBits > 0 ? budget / kBits : 1;
}

template <class T, int kBits, int kUnitW, int kBlock, int kPairs>
__global__ void __launch_bounds__(kWarps * 32, 2)
    quant_gemv_mma_kernel(const T* __restrict__ x, int tokens, const unsigned* __restrict__ codes,
                          const unsigned* __restrict__ headers, int out, int in,
                          float* __restrict__ y, int ldy, int tiles_per_block, int act,
                          T* __restrict__ act_out, int prefetch) {
  using G = Geometry<kBits, kUnitW, kBlock>;
  constexpr int kGroupWeights = G::kGroupWeights;
  constexpr int kXWords = kGroupWeights / 2;  // x of a group as 16-bit pairs
  constexpr int kSteps = kGroupWeights / 4;   // mmas per group (2 pairs of each row)
  constexpr int kSegSteps = kSteps / G::kSegments;
  constexpr int kUnroll = unroll_chunks<kBits, kPairs>();
  const T* tag = nullptr;
  const unsigned ones[4] = {Bits16<T>::kOne, Bits16<T>::kOne, Bits16<T>::kOne, Bits16<T>::kOne};

  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int g = lane >> 2, t = lane & 3;
  const int splits = kWarps / tiles_per_block;  // warps per tile
  const int tile_in_block = warp / splits, split = warp % splits;
  // Gated (act >= 0, two tiles per block): gate tile b and the up tile out / 32 tiles on.
  const int half_tiles = out / (2 * kTileRows);
  const int row0 = (act < 0 ? static_cast<int>(blockIdx.x) * tiles_per_block + tile_in_block
                            : static_cast<int>(blockIdx.x) + tile_in_block * half_tiles) *
                   kTileRows;
  const int groups = in / kGroupWeights;
  const int chunks = (groups + 3) / 4;
  const std::size_t row_words = (static_cast<std::size_t>(groups) * kBits + 3) / 4 * 4;
  const int row_blocks = in / kBlock;
  // Rows past the end (the last tile) read the last row; their sums are not written.
  const auto row_a = static_cast<std::size_t>(min(row0 + g, out - 1));
  const auto row_b = static_cast<std::size_t>(min(row0 + g + 8, out - 1));
  const int c_begin = split * chunks / splits, c_end = (split + 1) * chunks / splits;
  // The lane that supplies B column g: the one whose group the column covers.
  const bool x_lane = (g >> 1) == t;

  float acc[kPairs][4];
#pragma unroll
  for (int p = 0; p < kPairs; ++p) {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      acc[p][e] = 0.0f;
  }

  for (int c0 = c_begin; c0 < c_end; c0 += kUnroll) {
    unsigned wa[kUnroll][kBits], wb[kUnroll][kBits];
    unsigned ha[kUnroll][G::kSegments], hb[kUnroll][G::kSegments];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int group = (c0 + u) * 4 + t;
      if (c0 + u < c_end && group < groups) {
        const int tile = group >> 5, n = min(32, groups - tile * 32);
        const std::size_t at = static_cast<std::size_t>(tile) * 32 * kBits;
        load_group<kBits>(codes + row_a * row_words + at, n, group & 31, wa[u]);
        load_group<kBits>(codes + row_b * row_words + at, n, group & 31, wb[u]);
#pragma unroll
        for (int s = 0; s < G::kSegments; ++s) {
          const int block = group * kGroupWeights / kBlock + s;
          ha[u][s] = __ldg(headers + row_a * row_blocks + block);
          hb[u][s] = __ldg(headers + row_b * row_blocks + block);
        }
      } else {
        // Past this warp's columns or the row's last group: zero codes, headers and x.
#pragma unroll
        for (int i = 0; i < kBits; ++i)
          wa[u][i] = wb[u][i] = 0;
#pragma unroll
        for (int s = 0; s < G::kSegments; ++s)
          ha[u][s] = hb[u][s] = 0;
      }
    }
    // The next pass's code words and headers, asked of L2 now (prefetch != 0): the loads above
    // are in flight, and the next ones will find their bytes nearer.
    if (prefetch != 0) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int group = (c0 + kUnroll + u) * 4 + t;
        if (c0 + kUnroll + u < c_end && group < groups) {
          const int tile = group >> 5, n = min(32, groups - tile * 32);
          const std::size_t at = static_cast<std::size_t>(tile) * 32 * kBits;
          prefetch_group<kBits>(codes + row_a * row_words + at, n, group & 31);
          prefetch_group<kBits>(codes + row_b * row_words + at, n, group & 31);
          const int block = group * kGroupWeights / kBlock;
          asm volatile("prefetch.global.L2 [%0];" ::"l"(headers + row_a * row_blocks + block));
          asm volatile("prefetch.global.L2 [%0];" ::"l"(headers + row_b * row_blocks + block));
        }
      }
    }
    // Weights are constant: they load before the kernel before has finished (programmatic
    // dependent launch, common.cuh); x, which that kernel writes, after it.
    detail::grid_dependency_wait();
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (c0 + u >= c_end) break;  // the same for the whole warp
      const int group = (c0 + u) * 4 + t;
#pragma unroll
      for (int p = 0; p < kPairs; ++p) {
        // This lane's B values: x of its own group for token 2p + g % 2, if it is column g's.
        const int token = 2 * p + (g & 1);
        unsigned xw[kXWords];
        load_x_words<kGroupWeights>(xw, x, token, in, group,
                                    x_lane && group < groups && token < tokens);
#pragma unroll
        for (int s = 0; s < G::kSegments; ++s) {
          float d[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sx[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
          for (int k = 0; k < kSegSteps; ++k) {
            const int j = 2 * (s * kSegSteps + k);
            const unsigned a[4] = {code_pair<T, kBits, kUnitW>(wa[u], j),
                                   code_pair<T, kBits, kUnitW>(wb[u], j),
                                   code_pair<T, kBits, kUnitW>(wa[u], j + 1),
                                   code_pair<T, kBits, kUnitW>(wb[u], j + 1)};
            const unsigned b0 = x_pair<kBits, kUnitW>(xw, j);
            const unsigned b1 = x_pair<kBits, kUnitW>(xw, j + 1);
            mma(d, a, b0, b1, tag);
            mma(sx, ones, b0, b1, tag);
          }
          // d: rows g, g + 8 x tokens 2p, 2p + 1 of group t's segment; sx: sum(x) of it.
          const float2 fa = header_floats(ha[u][s]), fb = header_floats(hb[u][s]);
          add_scaled(acc[p], fa, fb, d, sx);
        }
      }
    }
  }

  detail::grid_dependency_wait();  // for warps without columns, before y is written
  // Over the four lanes of a row (their groups), then over the tile's warps.
  __shared__ float partial[kWarps][kTileRows][2 * kPairs];
#pragma unroll
  for (int p = 0; p < kPairs; ++p)
    quad_sum_store(acc[p], g, t, p, partial[warp]);
  __syncthreads();
  constexpr int kPerTile = kTileRows * 2 * kPairs;
  if (act >= 0) {
    // act(gate) * up, rounded once to 16 bits: what mlp_activation makes of these sums.
    const int width = out / 2;
    for (int i = static_cast<int>(threadIdx.x); i < kPerTile; i += kWarps * 32) {
      const int r = i / (2 * kPairs), token = i % (2 * kPairs);
      const int row = static_cast<int>(blockIdx.x) * kTileRows + r;
      if (row >= width || token >= tokens) continue;
      float gate = 0.0f, up = 0.0f;
      for (int k = 0; k < splits; ++k) {
        gate += partial[k][r][token];
        up += partial[splits + k][r][token];
      }
      act_out[static_cast<std::size_t>(token) * width + row] =
          detail::from_float<T>(detail::activate(static_cast<ActivationKind>(act), gate) * up);
    }
    return;
  }
  for (int i = static_cast<int>(threadIdx.x); i < tiles_per_block * kPerTile; i += kWarps * 32) {
    const int tile = i / kPerTile, r = (i / (2 * kPairs)) % kTileRows, token = i % (2 * kPairs);
    const int row = (static_cast<int>(blockIdx.x) * tiles_per_block + tile) * kTileRows + r;
    if (row >= out || token >= tokens) continue;
    float v = 0.0f;
    for (int k = 0; k < splits; ++k)
      v += partial[tile * splits + k][r][token];
    y[static_cast<std::size_t>(token) * ldy + row] = v;
  }
}

int multiprocessors() {
  static const int count = [] {
    int device = 0, n = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      return 132;
    }
    return n;
  }();
  return count;
}

// Tiles per thread block: 1 (the tile's columns split over 8 warps) unless the matrix has rows
// enough for 4 blocks per multiprocessor with more tiles per block (then 2, 4 or 8: fewer, longer
// warps). WEFT_QUANT_GEMV_TILES=1|2|4|8 fixes it, for measurements.
int tiles_per_block(int tiles) {
  static const int fixed = [] {
    const char* v = std::getenv("WEFT_QUANT_GEMV_TILES");
    const int n = v != nullptr ? std::atoi(v) : 0;
    return n == 1 || n == 2 || n == 4 || n == 8 ? n : 0;
  }();
  if (fixed > 0) return fixed;
  const int want = 4 * multiprocessors();
  int per = 1;
  while (per < kWarps && (tiles + 2 * per - 1) / (2 * per) >= want)
    per *= 2;
  return per;
}

// act < 0: y = x w^T (fp32, row stride ldy). act >= 0 (an ActivationKind): w is a fused
// gate_up matrix, act_out = act(gate) * up (16-bit, [tokens, w.rows / 2]).
// Whether warps with more than one pass over their columns ask L2 for the next pass's weights
// (WEFT_QUANT_GEMV_PREFETCH=0: no, for measurements).
bool prefetch_next_pass() {
  static const bool on = [] {
    const char* v = std::getenv("WEFT_QUANT_GEMV_PREFETCH");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

template <class T, int kBits, int kUnitW, int kBlock, int kPairs>
void launch_mma(const void* x, int tokens, const QuantMatrixView& w, float* y, int ldy, int act,
                void* act_out, cudaStream_t stream) {
  const QuantMatrixLayout layout = quant_matrix_layout(w.format, static_cast<std::size_t>(w.rows),
                                                       static_cast<std::size_t>(w.cols));
  const auto* base = static_cast<const unsigned char*>(w.data);
  const int tiles = (w.rows + kTileRows - 1) / kTileRows;
  const int per = act >= 0 ? 2 : tiles_per_block(tiles);
  const int grid = act >= 0 ? tiles / 2 : (tiles + per - 1) / per;
  detail::launch(quant_gemv_mma_kernel<T, kBits, kUnitW, kBlock, kPairs>, dim3(grid),
                 dim3(kWarps * 32), 0, stream, static_cast<const T*>(x), tokens,
                 reinterpret_cast<const unsigned*>(base),
                 reinterpret_cast<const unsigned*>(base + layout.header_offset()), w.rows, w.cols,
                 y, ldy, per, act, static_cast<T*>(act_out), prefetch_next_pass() ? 1 : 0);
}

template <class T, int kBits, int kUnitW, int kBlock>
void dispatch_pairs(const void* x, int tokens, const QuantMatrixView& w, float* y, int ldy, int act,
                    void* act_out, cudaStream_t stream) {
  if (tokens <= 2) {
    launch_mma<T, kBits, kUnitW, kBlock, 1>(x, tokens, w, y, ldy, act, act_out, stream);
  } else if (tokens <= 4) {
    launch_mma<T, kBits, kUnitW, kBlock, 2>(x, tokens, w, y, ldy, act, act_out, stream);
  } else {
    launch_mma<T, kBits, kUnitW, kBlock, 4>(x, tokens, w, y, ldy, act, act_out, stream);
  }
}

}  // namespace

#define WEFT_MMA_CALL(bits, unit, block) \
  dispatch_pairs<T, bits, unit, block>(x, tokens, w, y, ldy, -1, nullptr, stream)
#define WEFT_GATED_CALL(bits, unit, block)                                                    \
  dispatch_pairs<T, bits, unit, block>(x, tokens, w, nullptr, 0, static_cast<int>(kind), out, \
                                       stream)

void quant_gemv_mma(const void* x, int tokens, const QuantMatrixView& w, float* y, int ldy,
                    Precision precision, cudaStream_t stream) {
  if (tokens <= 0 || w.rows <= 0) return;
  WEFT_DISPATCH_PRECISION(precision, {WEFT_QUANT_FORMAT_SWITCH(w.format, WEFT_MMA_CALL)});
}

void quant_gemv_mma_gated(ActivationKind kind, const void* x, int tokens, const QuantMatrixView& w,
                          void* out, Precision precision, cudaStream_t stream) {
  if (tokens <= 0 || w.rows <= 0) return;
  WEFT_DISPATCH_PRECISION(precision, {WEFT_QUANT_FORMAT_SWITCH(w.format, WEFT_GATED_CALL)});
}

#undef WEFT_MMA_CALL
#undef WEFT_GATED_CALL

}  // namespace weft::cuda
