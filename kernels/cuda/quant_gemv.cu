// The dequantize-fused products and the dequantization of quant_gemv.hpp, for every block
// format, reading the GPU layout of quant_layout.hpp.
//
// Product: a thread block of kWarps warps takes kRows consecutive output rows; its warps split
// the rows' tiles (32 groups of 32 units) between them, lane i taking group i of a tile. A
// lane loads the group's code words of all kRows rows with 16-, 8- and 4-byte loads (each a
// contiguous run over the warp), then per chunk of 8 units turns the codes into floats (the
// 2^23 exponent trick: no int-to-float conversion) and multiplies them with every token's x
// (read as 16-byte vectors through L1, once for the kRows rows): sum(q * x) per row and token,
// sum(x) per token, and per block acc += scale * sum(q * x) + min * sum(x). That is one
// subtraction and one fma per weight and token, plus the code's shift and mask. Sums: per lane
// in fp32, then over the warp, then over the warps in a fixed order, so results do not depend
// on timing.

#include <cuda_fp16.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/quant_gemv.cuh"
#include "kernels/cuda/quant_gemv.hpp"

namespace weft::cuda {
namespace {

constexpr int kWarps = 4;

using namespace quant_device;

// The codes of units u0 .. u0 + 7 of a group as floats (8 * kUnitW weights' codes).
template <int kBits, int kUnitW>
__device__ __forceinline__ void code_chunk(const unsigned (&w)[kBits], int u0,
                                           float (&out)[8 * kUnitW]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int u = u0 + j;
    if constexpr (kUnitW == 2) {
      // Q3H: p = q0 * 11 + q1; p / 11 == (p * 187) >> 11 for every 7-bit p.
      const unsigned p = unit_code<kBits>(w, u);
      const unsigned q0 = (p * 187u) >> 11;
      out[2 * j] = code_float(q0);
      out[2 * j + 1] = code_float(p - q0 * 11u);
    } else if constexpr (kBits == 8) {
      // One byte permute: the byte, two zero bytes and 0x4b.
      const int bit = u * 8;
      out[j] = __uint_as_float(__byte_perm(w[bit >> 5], 0x4b000000u, 0x7540u | ((bit & 31) >> 3))) -
               8388608.0f;
    } else {
      out[j] = code_float(unit_code<kBits>(w, u));
    }
  }
}

// The dequantized weights of the same units: min + q * scale (one fma).
template <int kBits, int kUnitW>
__device__ __forceinline__ void dequantize_chunk(const unsigned (&w)[kBits], int u0, float2 sm,
                                                 float (&out)[8 * kUnitW]) {
  code_chunk<kBits, kUnitW>(w, u0, out);
#pragma unroll
  for (int e = 0; e < 8 * kUnitW; ++e)
    out[e] = fmaf(out[e], sm.x, sm.y);
}

// q4 at 1 or 2 tokens (batch-1 decode), a group's sums with fewer integer operations: nibble
// j of a code word is masked where it lies, so 2^23 + q * 16^j is a float at the cost of one
// LOP3 (nibbles 4-7 the same from the word shifted down by 16: one shift per 8 codes instead
// of 7), minus 2^23 exactly q * 16^j. The products with weight 16^j go to their own sum,
// scaled back by 16^-j once per group; powers of two, so every value is the one the plain
// path forms, scaled exactly.
template <class T, int kRows, int kTokens>
__device__ __forceinline__ void q4_segment(const unsigned (&w)[kRows][4], const T* xg, int in,
                                           int tokens, float (&qx)[kRows][kTokens],
                                           float (&sx)[kTokens]) {
  const T* tag = nullptr;
  float part[kRows][kTokens][4];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
#pragma unroll
      for (int j = 0; j < 4; ++j)
        part[r][t][j] = 0.0f;
    }
  }
#pragma unroll
  for (int c = 0; c < 4; ++c) {  // code word c: units 8c .. 8c + 7
    float qf[kRows][8];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const unsigned lo = w[r][c], hi = w[r][c] >> 16;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        qf[r][j] = __uint_as_float((lo & (0xfu << (4 * j))) | 0x4b000000u) - 8388608.0f;
        qf[r][j + 4] = __uint_as_float((hi & (0xfu << (4 * j))) | 0x4b000000u) - 8388608.0f;
      }
    }
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      if (t < tokens) {
        float xf[8];
        unpack(__ldg(reinterpret_cast<const uint4*>(xg + static_cast<std::size_t>(t) * in + 8 * c)),
               xf, tag);
#pragma unroll
        for (int e = 0; e < 8; ++e)
          sx[t] += xf[e];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            part[r][t][j] = fmaf(qf[r][j], xf[j], part[r][t][j]);
            part[r][t][j] = fmaf(qf[r][j + 4], xf[j + 4], part[r][t][j]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      qx[r][t] = fmaf(
          part[r][t][3], 1.0f / 4096.0f,
          fmaf(part[r][t][2], 1.0f / 256.0f, fmaf(part[r][t][1], 1.0f / 16.0f, part[r][t][0])));
    }
  }
}

template <class T, int kBits, int kUnitW, int kBlock, int kTokens, int kRows>
__global__ void __launch_bounds__(kWarps * 32)
    quant_gemv_kernel(const T* __restrict__ x, int tokens, const unsigned* __restrict__ codes,
                      const unsigned* __restrict__ headers, int out, int in, float* __restrict__ y,
                      int ldy, bool release) {
  using G = Geometry<kBits, kUnitW, kBlock>;
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int groups = in / G::kGroupWeights;
  const int tiles = (groups + 31) / 32;
  const std::size_t row_words = (static_cast<std::size_t>(groups) * kBits + 3) / 4 * 4;
  const int row_blocks = in / kBlock;
  const int row0 = static_cast<int>(blockIdx.x) * kRows;
  const T* tag = nullptr;

  float acc[kRows][kTokens] = {};

  // The codes and headers of a tile's group `lane` for the kRows rows (constant weights).
  auto load_tile = [&](int tile, int n, unsigned(&w)[kRows][kBits],
                       float2(&sm)[kRows][G::kSegments]) {
    const int g = tile * 32 + lane;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const std::size_t row = static_cast<std::size_t>(min(row0 + r, out - 1));
      load_group<kBits>(codes + row * row_words + static_cast<std::size_t>(tile) * 32 * kBits, n,
                        lane, w[r]);
#pragma unroll
      for (int s = 0; s < G::kSegments; ++s) {
        sm[r][s] =
            header_floats(__ldg(headers + row * row_blocks + g * G::kGroupWeights / kBlock + s));
      }
    }
  };
  // Programmatic dependent launch: the warp's first tile is loaded before waiting on the
  // kernel before, x only after; the sums are those without it. The loop's later tiles load
  // into the same buffer once the tile before is summed: a buffer of its own for the first tile
  // took q4_b32's one-token kernel from 80 to 107 registers, 6 to 4 blocks an SM, and its batch-1
  // decode steps 8% longer (docs/PERFORMANCE.md, "One buffer in the lanes product").
  unsigned w[kRows][kBits];
  float2 sm[kRows][G::kSegments];
  if (warp < tiles && lane < min(32, groups - warp * 32)) {
    load_tile(warp, min(32, groups - warp * 32), w, sm);
  }
  detail::grid_dependency_wait_then_release(release);

  for (int tile = warp; tile < tiles; tile += kWarps) {
    const int n = min(32, groups - tile * 32);
    if (tile != warp && lane < n) load_tile(tile, n, w, sm);
    if (lane < n) {
      const int g = tile * 32 + lane;
      // Per header segment: sum(q * x) per row and token, sum(x) per token, then
      // acc += scale * sum(q * x) + min * sum(x).
      const T* xg = x + static_cast<std::size_t>(g) * G::kGroupWeights;
#pragma unroll
      for (int s = 0; s < G::kSegments; ++s) {
        float qx[kRows][kTokens], sx[kTokens];
#pragma unroll
        for (int t = 0; t < kTokens; ++t) {
          sx[t] = 0.0f;
#pragma unroll
          for (int r = 0; r < kRows; ++r)
            qx[r][t] = 0.0f;
        }
        if constexpr (kBits == 4 && kTokens <= 2) {
          q4_segment<T, kRows, kTokens>(w, xg, in, tokens, qx, sx);
        } else {
#pragma unroll
          for (int c = 0; c < G::kSegmentUnits / 8; ++c) {
            const int u0 = s * G::kSegmentUnits + c * 8;
            float qf[kRows][8 * kUnitW];
#pragma unroll
            for (int r = 0; r < kRows; ++r)
              code_chunk<kBits, kUnitW>(w[r], u0, qf[r]);
#pragma unroll
            for (int t = 0; t < kTokens; ++t) {
              if (t < tokens) {
                const uint4* xp = reinterpret_cast<const uint4*>(
                    xg + static_cast<std::size_t>(t) * in + u0 * kUnitW);
                float xf[8 * kUnitW];
#pragma unroll
                for (int v = 0; v < kUnitW; ++v)
                  unpack(__ldg(xp + v), xf + 8 * v, tag);
#pragma unroll
                for (int e = 0; e < 8 * kUnitW; ++e)
                  sx[t] += xf[e];
#pragma unroll
                for (int r = 0; r < kRows; ++r) {
#pragma unroll
                  for (int e = 0; e < 8 * kUnitW; ++e)
                    qx[r][t] = fmaf(qf[r][e], xf[e], qx[r][t]);
                }
              }
            }
          }
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
#pragma unroll
          for (int t = 0; t < kTokens; ++t)
            acc[r][t] = fmaf(sm[r][s].x, qx[r][t], fmaf(sm[r][s].y, sx[t], acc[r][t]));
        }
      }
    }
  }

  __shared__ float partial[kWarps][kRows][kTokens];
  warp_partials(acc, partial[warp], lane);
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < kRows * kTokens; i += kWarps * 32) {
    const int r = i / kTokens, t = i % kTokens;
    if (row0 + r >= out || t >= tokens) continue;
    float v = 0.0f;
#pragma unroll
    for (int k = 0; k < kWarps; ++k)
      v += partial[k][r][t];
    y[static_cast<std::size_t>(t) * ldy + row0 + r] = v;
  }
}

// One thread per group of one row: its 32 * kUnitW weights, dequantized, as 16-bit values.
template <class T, int kBits, int kUnitW, int kBlock>
__global__ void __launch_bounds__(256)
    quant_dequantize_kernel(const unsigned* __restrict__ codes,
                            const unsigned* __restrict__ headers, int row_begin, int rows, int in,
                            T* __restrict__ out) {
  using G = Geometry<kBits, kUnitW, kBlock>;
  const int groups = in / G::kGroupWeights;
  const long long index = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= static_cast<long long>(rows) * groups) return;
  const int local_row = static_cast<int>(index / groups), g = static_cast<int>(index % groups);
  const std::size_t row = static_cast<std::size_t>(row_begin) + local_row;
  const std::size_t row_words = (static_cast<std::size_t>(groups) * kBits + 3) / 4 * 4;
  const int row_blocks = in / kBlock;
  const int tile = g / 32, n = min(32, groups - tile * 32);
  unsigned w[kBits];
  load_group<kBits>(codes + row * row_words + static_cast<std::size_t>(tile) * 32 * kBits, n,
                    g % 32, w);
  T* o = out + static_cast<std::size_t>(local_row) * in +
         static_cast<std::size_t>(g) * G::kGroupWeights;
#pragma unroll
  for (int s = 0; s < G::kSegments; ++s) {
    const float2 sm =
        header_floats(__ldg(headers + row * row_blocks + g * G::kGroupWeights / kBlock + s));
#pragma unroll
    for (int c = 0; c < G::kSegmentUnits / 8; ++c) {
      const int u0 = s * G::kSegmentUnits + c * 8;
      float wf[8 * kUnitW];
      dequantize_chunk<kBits, kUnitW>(w, u0, sm, wf);
#pragma unroll
      for (int v = 0; v < kUnitW; ++v) {
        T h[8];
#pragma unroll
        for (int e = 0; e < 8; ++e)
          h[e] = detail::from_float<T>(wf[8 * v + e]);
        uint4 packed;
        memcpy(&packed, h, sizeof(packed));
        *reinterpret_cast<uint4*>(o + u0 * kUnitW + 8 * v) = packed;
      }
    }
  }
}

template <class T, int kBits, int kUnitW, int kBlock, int kTokens>
void launch_gemv(const void* x, int tokens, const QuantMatrixView& w, float* y, int ldy,
                 cudaStream_t stream) {
  // Rows per block: 8 for q4_b32 at one token (128 registers, 4 blocks an SM, twice the loads in
  // flight a thread and x read once for 8 rows: the 8B shape's batch-1 step 3.03-3.09 against
  // 3.17-3.26 ms with 4 and 3.45 with 2 on an H100; q4_b64's kernel takes 168 registers with 8
  // rows and was 1% slower: docs/PERFORMANCE.md, "Rows per block"), else 4 up to 4 tokens and 2
  // above. A row's sums do not depend on it.
  constexpr int kRows = kTokens == 1 && kBits == 4 && kBlock == 32 ? 8 : kTokens <= 4 ? 4 : 2;
  const QuantMatrixLayout layout = quant_matrix_layout(w.format, static_cast<std::size_t>(w.rows),
                                                       static_cast<std::size_t>(w.cols));
  const auto* base = static_cast<const unsigned char*>(w.data);
  const int grid = (w.rows + kRows - 1) / kRows;
  detail::launch_with(detail::pdl_products_enabled(),
                      quant_gemv_kernel<T, kBits, kUnitW, kBlock, kTokens, kRows>, grid,
                      kWarps * 32, 0, stream, static_cast<const T*>(x), tokens,
                      reinterpret_cast<const unsigned*>(base),
                      reinterpret_cast<const unsigned*>(base + layout.header_offset()), w.rows,
                      w.cols, y, ldy, detail::release_early(detail::kReleaseQuantGemv));
}

template <class T, int kBits, int kUnitW, int kBlock>
void dispatch_tokens(const void* x, int tokens, const QuantMatrixView& w, float* y, int ldy,
                     cudaStream_t stream) {
  if (tokens == 1) {
    launch_gemv<T, kBits, kUnitW, kBlock, 1>(x, tokens, w, y, ldy, stream);
  } else if (tokens == 2) {
    launch_gemv<T, kBits, kUnitW, kBlock, 2>(x, tokens, w, y, ldy, stream);
  } else if (tokens <= 4) {
    launch_gemv<T, kBits, kUnitW, kBlock, 4>(x, tokens, w, y, ldy, stream);
  } else {
    launch_gemv<T, kBits, kUnitW, kBlock, 8>(x, tokens, w, y, ldy, stream);
  }
}

template <class T, int kBits, int kUnitW, int kBlock>
void launch_dequantize(const QuantMatrixView& w, int row_begin, int rows, void* out,
                       cudaStream_t stream) {
  const QuantMatrixLayout layout = quant_matrix_layout(w.format, static_cast<std::size_t>(w.rows),
                                                       static_cast<std::size_t>(w.cols));
  const auto* base = static_cast<const unsigned char*>(w.data);
  const long long threads =
      static_cast<long long>(rows) * static_cast<long long>(layout.row_groups);
  const auto grid = static_cast<unsigned>((threads + 255) / 256);
  quant_dequantize_kernel<T, kBits, kUnitW, kBlock>
      <<<grid, 256, 0, stream>>>(reinterpret_cast<const unsigned*>(base),
                                 reinterpret_cast<const unsigned*>(base + layout.header_offset()),
                                 row_begin, rows, w.cols, static_cast<T*>(out));
}

}  // namespace

#define WEFT_GEMV_CALL(bits, unit, block) \
  dispatch_tokens<T, bits, unit, block>(x, tokens, w, y, ldy, stream)
#define WEFT_DEQUANTIZE_CALL(bits, unit, block) \
  launch_dequantize<T, bits, unit, block>(w, row_begin, rows, out, stream)

bool quant_gemv_kernel_from_name(const char* name, QuantGemvKernel& out) {
  for (const QuantGemvKernel k :
       {QuantGemvKernel::kLanes, QuantGemvKernel::kMma, QuantGemvKernel::kStream,
        QuantGemvKernel::kDp4a, QuantGemvKernel::kAuto}) {
    if (std::strcmp(name, quant_gemv_kernel_name(k)) == 0) {
      out = k;
      return true;
    }
  }
  return false;
}

bool quant_gemv_parse_kernels(const char* value, QuantGemvKernel& small, QuantGemvKernel& large) {
  const char* slash = std::strchr(value, '/');
  if (slash == nullptr) {
    if (!quant_gemv_kernel_from_name(value, small)) return false;
    large = small;
    return true;
  }
  const std::string first(value, slash);
  return quant_gemv_kernel_from_name(first.c_str(), small) &&
         quant_gemv_kernel_from_name(slash + 1, large);
}

QuantGemvKernel quant_gemv_default_kernel(int tokens) {
  static const std::pair<QuantGemvKernel, QuantGemvKernel> kernels = [] {
    const char* v = std::getenv("WEFT_QUANT_GEMV");
    QuantGemvKernel small = QuantGemvKernel::kAuto, large = QuantGemvKernel::kAuto;
    if (v == nullptr || *v == '\0') return std::make_pair(small, large);
    if (quant_gemv_parse_kernels(v, small, large)) return std::make_pair(small, large);
    std::fprintf(
        stderr,
        "WEFT_QUANT_GEMV=%s: not a kernel (lanes, mma, stream, dp4a or auto) or a pair of them "
        "(K1/K2: K1 at 1-2 tokens, K2 at 3-8); using auto\n",
        v);
    return std::make_pair(QuantGemvKernel::kAuto, QuantGemvKernel::kAuto);
  }();
  return tokens <= 2 ? kernels.first : kernels.second;
}

bool quant_gemv_stream_supported(QuantGemvFormat format) {
  return format == QuantGemvFormat::kQ4B32 || format == QuantGemvFormat::kQ4B64 ||
         format == QuantGemvFormat::kQ8B32 || format == QuantGemvFormat::kQ8B64;
}

QuantGemvKernel quant_gemv_resolve(QuantGemvKernel kernel, QuantGemvFormat format, int tokens) {
  // Measured on an H100 (2026-11-26, PERFORMANCE.md "The stream quantized product"): for the
  // 8B shape's q4_b32 decode, lanes takes 3.11 ms per batch-1 step against stream's 3.26 and
  // mma's 3.70; at 8 tokens stream and mma take 6.12 and 6.11 ms against lanes' 12.09. So
  // lanes at 1-2 tokens, then stream where the format has it, else mma; and dp4a before lanes
  // where it has the format (PERFORMANCE.md, "Rounded inputs in the one-token q4 product").
  if (kernel == QuantGemvKernel::kStream) {
    return quant_gemv_stream_supported(format) ? kernel : QuantGemvKernel::kLanes;
  }
  if (kernel == QuantGemvKernel::kDp4a) {
    return quant_gemv_dp4a_supported(format, tokens)
               ? kernel
               : quant_gemv_resolve(QuantGemvKernel::kAuto, format, tokens);
  }
  if (kernel != QuantGemvKernel::kAuto) return kernel;
  if (tokens <= 2) {
    return quant_gemv_dp4a_supported(format, tokens) ? QuantGemvKernel::kDp4a
                                                     : QuantGemvKernel::kLanes;
  }
  return quant_gemv_stream_supported(format) ? QuantGemvKernel::kStream : QuantGemvKernel::kMma;
}

void quant_gemv(QuantGemvKernel kernel, const void* x, int tokens, const QuantMatrixView& w,
                float* y, int ldy, Precision precision, cudaStream_t stream) {
  if (tokens <= 0 || w.rows <= 0) return;
  switch (quant_gemv_resolve(kernel, w.format, tokens)) {
    case QuantGemvKernel::kMma:
      quant_gemv_mma(x, tokens, w, y, ldy, precision, stream);
      return;
    case QuantGemvKernel::kStream:
      quant_gemv_stream(x, tokens, w, y, ldy, -1, nullptr, precision, stream);
      return;
    case QuantGemvKernel::kDp4a:
      quant_gemv_dp4a(x, tokens, w, y, ldy, -1, nullptr, precision, stream);
      return;
    default:
      break;
  }
  WEFT_DISPATCH_PRECISION(precision, {WEFT_QUANT_FORMAT_SWITCH(w.format, WEFT_GEMV_CALL)});
}

bool quant_gemv_gated_supported(const void* x, int tokens, const QuantMatrixView& w) {
  static const bool on = [] {
    const char* v = std::getenv("WEFT_QUANT_GATED");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  const QuantGemvKernel k = quant_gemv_resolve(quant_gemv_default_kernel(tokens), w.format, tokens);
  return on &&
         (k == QuantGemvKernel::kMma || k == QuantGemvKernel::kStream ||
          k == QuantGemvKernel::kDp4a) &&
         quant_gemv_supported(x, tokens, w) && w.rows % 32 == 0;
}

void quant_gemv_gated(QuantGemvKernel kernel, ActivationKind kind, const void* x, int tokens,
                      const QuantMatrixView& w, void* out, Precision precision,
                      cudaStream_t stream) {
  if (tokens <= 0 || w.rows <= 0) return;
  const QuantGemvKernel k = quant_gemv_resolve(kernel, w.format, tokens);
  if (k == QuantGemvKernel::kStream) {
    quant_gemv_stream(x, tokens, w, nullptr, 0, static_cast<int>(kind), out, precision, stream);
  } else if (k == QuantGemvKernel::kDp4a) {
    quant_gemv_dp4a(x, tokens, w, nullptr, 0, static_cast<int>(kind), out, precision, stream);
  } else {
    quant_gemv_mma_gated(kind, x, tokens, w, out, precision, stream);
  }
}

void quant_gemv_gated(ActivationKind kind, const void* x, int tokens, const QuantMatrixView& w,
                      void* out, Precision precision, cudaStream_t stream) {
  quant_gemv_gated(quant_gemv_default_kernel(tokens), kind, x, tokens, w, out, precision, stream);
}

void quant_gemv(const void* x, int tokens, const QuantMatrixView& w, float* y, int ldy,
                Precision precision, cudaStream_t stream) {
  quant_gemv(quant_gemv_default_kernel(tokens), x, tokens, w, y, ldy, precision, stream);
}

void quant_dequantize(const QuantMatrixView& w, int row_begin, int rows, void* out,
                      Precision precision, cudaStream_t stream) {
  if (rows <= 0) return;
  WEFT_DISPATCH_PRECISION(precision, {WEFT_QUANT_FORMAT_SWITCH(w.format, WEFT_DEQUANTIZE_CALL)});
}

#undef WEFT_GEMV_CALL
#undef WEFT_DEQUANTIZE_CALL

}  // namespace weft::cuda
