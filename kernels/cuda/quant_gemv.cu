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

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/quant_gemv.hpp"

namespace weft::cuda {
namespace {

constexpr int kWarps = 4;

// Words of piece `piece` of a group of `bits` words (quant_piece_width, for device code).
__host__ __device__ constexpr int piece_width(int bits, int piece) {
  int left = bits;
  for (int p = 0;; ++p) {
    const int w = left >= 4 ? 4 : left >= 2 ? 2 : left;
    if (p == piece) return w;
    left -= w;
    if (left == 0) return 0;
  }
}

// Weights are read once: they skip L1, which keeps x.
__device__ __forceinline__ void load_words(const unsigned* p, unsigned* w, int count) {
  if (count == 4) {
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
        : "l"(p));
  } else if (count == 2) {
    asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
  } else {
    asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(w[0]) : "l"(p));
  }
}

// Group `i` of a tile of `n` groups at `tile`: its kBits words, piece by piece.
template <int kBits, int kPiece = 0, int kBefore = 0>
__device__ __forceinline__ void load_group(const unsigned* tile, int n, int i,
                                           unsigned (&w)[kBits]) {
  constexpr int width = piece_width(kBits, kPiece);
  if constexpr (width > 0) {
    load_words(tile + static_cast<std::size_t>(n) * kBefore + i * width, w + kBefore, width);
    load_group<kBits, kPiece + 1, kBefore + width>(tile, n, i, w);
  }
}

// Unit u (0..31) of a group: bits u * kBits .. of its words, least significant first.
template <int kBits>
__device__ __forceinline__ unsigned unit_code(const unsigned (&w)[kBits], int u) {
  const int bit = u * kBits, word = bit >> 5, shift = bit & 31;
  const unsigned v =
      shift + kBits <= 32 ? w[word] >> shift : __funnelshift_r(w[word], w[word + 1], shift);
  return v & ((1u << kBits) - 1u);
}

// A small unsigned integer as a float, exactly: 2^23 + v has v in its mantissa.
__device__ __forceinline__ float code_float(unsigned v) {
  return __uint_as_float(v | 0x4b000000u) - 8388608.0f;
}

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

// Eight 16-bit values (the lower address in the low half of each word) as floats.
__device__ __forceinline__ void unpack(const uint4& v, float* f, const __nv_bfloat16*) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ void unpack(const uint4& v, float* f, const __half*) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __half2 h;
    memcpy(&h, &w[i], sizeof(h));
    const float2 p = __half22float2(h);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

__device__ __forceinline__ float2 header_floats(unsigned word) {
  __half2 h;
  memcpy(&h, &word, sizeof(h));
  return __half22float2(h);  // .x scale (the lower address), .y min
}

template <int kBits, int kUnitW, int kBlock>
struct Geometry {
  static constexpr int kGroupWeights = 32 * kUnitW;
  // Headers per group: 2 for q3h_b32 (a group of 64 weights, blocks of 32), else 1 (a b64
  // block of 1-weight units spans two groups, and its header serves both).
  static constexpr int kSegments = kGroupWeights > kBlock ? kGroupWeights / kBlock : 1;
  static constexpr int kSegmentUnits = 32 / kSegments;
  static_assert(kSegmentUnits % 8 == 0);
};

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
                      int ldy) {
  using G = Geometry<kBits, kUnitW, kBlock>;
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int groups = in / G::kGroupWeights;
  const int tiles = (groups + 31) / 32;
  const std::size_t row_words = (static_cast<std::size_t>(groups) * kBits + 3) / 4 * 4;
  const int row_blocks = in / kBlock;
  const int row0 = static_cast<int>(blockIdx.x) * kRows;
  const T* tag = nullptr;

  float acc[kRows][kTokens];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int t = 0; t < kTokens; ++t)
      acc[r][t] = 0.0f;
  }

  for (int tile = warp; tile < tiles; tile += kWarps) {
    const int n = min(32, groups - tile * 32);
    if (lane < n) {
      const int g = tile * 32 + lane;
      unsigned w[kRows][kBits];
      float2 sm[kRows][G::kSegments];
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
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      const float v = detail::warp_sum(acc[r][t]);
      if (lane == 0) partial[warp][r][t] = v;
    }
  }
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
  constexpr int kRows = kTokens <= 4 ? 4 : 2;
  const QuantMatrixLayout layout = quant_matrix_layout(w.format, static_cast<std::size_t>(w.rows),
                                                       static_cast<std::size_t>(w.cols));
  const auto* base = static_cast<const unsigned char*>(w.data);
  const int grid = (w.rows + kRows - 1) / kRows;
  quant_gemv_kernel<T, kBits, kUnitW, kBlock, kTokens, kRows><<<grid, kWarps * 32, 0, stream>>>(
      static_cast<const T*>(x), tokens, reinterpret_cast<const unsigned*>(base),
      reinterpret_cast<const unsigned*>(base + layout.header_offset()), w.rows, w.cols, y, ldy);
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

// The switch from a format to its kernels' template arguments (code bits, weights per unit,
// block), calling CALL(bits, unit_weights, block).
#define WEFT_QUANT_FORMAT_SWITCH(format, CALL) \
  switch (format) {                            \
    case QuantGemvFormat::kQ8B32:              \
      CALL(8, 1, 32);                          \
      break;                                   \
    case QuantGemvFormat::kQ8B64:              \
      CALL(8, 1, 64);                          \
      break;                                   \
    case QuantGemvFormat::kQ6B32:              \
      CALL(6, 1, 32);                          \
      break;                                   \
    case QuantGemvFormat::kQ6B64:              \
      CALL(6, 1, 64);                          \
      break;                                   \
    case QuantGemvFormat::kQ5B32:              \
      CALL(5, 1, 32);                          \
      break;                                   \
    case QuantGemvFormat::kQ5B64:              \
      CALL(5, 1, 64);                          \
      break;                                   \
    case QuantGemvFormat::kQ4B32:              \
      CALL(4, 1, 32);                          \
      break;                                   \
    case QuantGemvFormat::kQ4B64:              \
      CALL(4, 1, 64);                          \
      break;                                   \
    case QuantGemvFormat::kQ3HB32:             \
      CALL(7, 2, 32);                          \
      break;                                   \
    case QuantGemvFormat::kQ3HB64:             \
      CALL(7, 2, 64);                          \
      break;                                   \
    case QuantGemvFormat::kQ3B32:              \
      CALL(3, 1, 32);                          \
      break;                                   \
    case QuantGemvFormat::kQ3B64:              \
      CALL(3, 1, 64);                          \
      break;                                   \
    case QuantGemvFormat::kQ2B32:              \
      CALL(2, 1, 32);                          \
      break;                                   \
    case QuantGemvFormat::kQ2B64:              \
      CALL(2, 1, 64);                          \
      break;                                   \
  }

}  // namespace

#define WEFT_GEMV_CALL(bits, unit, block) \
  dispatch_tokens<T, bits, unit, block>(x, tokens, w, y, ldy, stream)
#define WEFT_DEQUANTIZE_CALL(bits, unit, block) \
  launch_dequantize<T, bits, unit, block>(w, row_begin, rows, out, stream)

void quant_gemv(const void* x, int tokens, const QuantMatrixView& w, float* y, int ldy,
                Precision precision, cudaStream_t stream) {
  if (tokens <= 0 || w.rows <= 0) return;
  WEFT_DISPATCH_PRECISION(precision, {WEFT_QUANT_FORMAT_SWITCH(w.format, WEFT_GEMV_CALL)});
}

void quant_dequantize(const QuantMatrixView& w, int row_begin, int rows, void* out,
                      Precision precision, cudaStream_t stream) {
  if (rows <= 0) return;
  WEFT_DISPATCH_PRECISION(precision, {WEFT_QUANT_FORMAT_SWITCH(w.format, WEFT_DEQUANTIZE_CALL)});
}

#undef WEFT_GEMV_CALL
#undef WEFT_DEQUANTIZE_CALL
#undef WEFT_QUANT_FORMAT_SWITCH

}  // namespace weft::cuda
