// The dp4a kernel of quant_gemv.hpp (QuantGemvKernel::kDp4a): q4_b32 and q4_b64 at 1-2 tokens
// (batch-1 decode) with x rounded to 8-bit integers, one scale per 32 inputs, and the products
// summed by the integer dot-product instruction (dp4a: four byte products and their sum in one
// instruction), as llama.cpp's one-token quantized products do.
//
// Why: the lanes kernel (quant_gemv.cu) turns every 4-bit code into a float (a mask, a
// subtraction) and multiplies it in an fp32 fma: about 3.3 instructions a weight at one token,
// which on an H100 reading 4-bit weights at 3 TB/s is most of what the multiprocessors can
// issue; its products ran at 50-67% of the copy bandwidth where q8's (half the weights a byte)
// ran at 90% (docs/PERFORMANCE.md, "One buffer in the lanes product"). Here a code word (8
// weights) costs two masks and two dp4a: the even codes are its low nibbles, the odd ones its
// high nibbles (kept in place, 16 times their value: a power of two, scaled back once a group).
// Rounding x costs about 5 instructions an input, shared by the kRows rows of a block.
//
// Layout and schedule as lanes: a thread block of 4 warps takes kRows rows, lane i a tile's
// group i (32 weights: 4 code words and the group's block header). The lane rounds its 32
// inputs of each token itself: s = max|x| / 127, xq = round(x / s) (round to nearest even
// through the 1.5 * 2^23 trick, no conversion instruction), packed as four words of even
// inputs and four of odd ones. Per row and block header: acc += scale * s * sum(q * xq) +
// min * sum(x), sum(x) exact in fp32 (only the products see the rounded x: the error of a row
// is at most sum |q * scale| * s / 2 over its groups). Sums in a fixed order: per lane, then
// over the warp, then over the warps in warp order.
//
// Remainders (kFine, WEFT_QUANT_DP4A_FINE=1): the rounding's remainders x - s * xq are rounded
// too, on the scale s / 254, and summed by two more dp4a a code word, which carries x to within
// s / 508: weft-tiny's q4 logits then stay as close to the CPU's as with fp32 inputs (worst
// relative error 0.006-0.007 against 0.021), at 5-10% of an 8B batch-1 step on an H100
// (docs/PERFORMANCE.md, "Rounded inputs in the one-token q4 product"). Off by default.
//
// Gated (act >= 0): w is a gated MLP's fused gate_up matrix (gate rows, then as many up rows);
// a block takes kRows / 2 gate rows and the up rows that match them and writes act(gate) * up
// as 16-bit values, what mlp_activation makes of the product's rows.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/activation.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/quant_gemv.cuh"
#include "kernels/cuda/quant_gemv.hpp"

namespace weft::cuda {
namespace {

using namespace quant_device;

constexpr int kWarps = 4;
// Rows a block: 8 (4 for the products of up to 8192 rows made the 8B q4_b64 batch-1 step 6%
// slower on an H100: docs/PERFORMANCE.md, "Rounded inputs in the one-token q4 product").
constexpr int kRows = 8;

// Bytes 0 of a, b, c and d, in that order, as one word.
__device__ __forceinline__ unsigned pack_low_bytes(unsigned a, unsigned b, unsigned c, unsigned d) {
  return __byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, d, 0x0040), 0x5410);
}

// sum of the four unsigned bytes of a times the four signed bytes of b, plus c.
__device__ __forceinline__ int dot4_us(unsigned a, unsigned b, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// One token's 32 inputs of a group, rounded: xe[c] holds inputs 8c, 8c+2, 8c+4, 8c+6 as
// signed bytes, xo[c] inputs 8c+1, 8c+3, 8c+5, 8c+7; s the scale, sum the exact fp32 sum.
// kFine: also the rounding's remainders x - s * xq (at most s / 2), rounded on the scale
// s / 254 into re and ro the same way: x = s * xq + s / 254 * rq to within s / 508.
template <class T, bool kFine>
__device__ __forceinline__ void round_inputs(const T* xg, unsigned (&xe)[4], unsigned (&xo)[4],
                                             unsigned (&re)[4], unsigned (&ro)[4], float& s,
                                             float& sum) {
  const T* tag = nullptr;
  float xf[32];
#pragma unroll
  for (int v = 0; v < 4; ++v)
    unpack(__ldg(reinterpret_cast<const uint4*>(xg) + v), xf + 8 * v, tag);
  float amax = 0.0f;
  sum = 0.0f;
#pragma unroll
  for (int e = 0; e < 32; ++e) {
    amax = fmaxf(amax, fabsf(xf[e]));
    sum += xf[e];
  }
  s = amax * (1.0f / 127.0f);
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23: v + kMagic has v in its low bits
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    unsigned b[8], r[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if constexpr (kFine) {
        const float t = xf[8 * c + j] * inv;
        const float q = t + kMagic;  // round(t), ties to even, in the low byte
        b[j] = __float_as_uint(q);
        r[j] = __float_as_uint(fmaf(t - (q - kMagic), 254.0f, kMagic));
      } else {
        b[j] = __float_as_uint(fmaf(xf[8 * c + j], inv, kMagic));
      }
    }
    xe[c] = pack_low_bytes(b[0], b[2], b[4], b[6]);
    xo[c] = pack_low_bytes(b[1], b[3], b[5], b[7]);
    if constexpr (kFine) {
      re[c] = pack_low_bytes(r[0], r[2], r[4], r[6]);
      ro[c] = pack_low_bytes(r[1], r[3], r[5], r[7]);
    }
  }
}

// kNorm: kNormNone; kNormIn: x is the rows a producer wrote (residual * weight) and each row
// and token is scaled by 1 / rms from the producer's sums of squares; kNormOut (not gated): the
// rows are added into the residual stream, which is written back with residual * weight (16
// bits) and each block's sums of squares (quant_gemv.hpp, QuantNormArgs).
constexpr int kNormNone = 0, kNormIn = 1, kNormOut = 2;

// Four blocks an SM (128 registers) at 1-2 tokens: ptxas otherwise took 137-167 for some q4_b64
// and remainder variants (3 blocks an SM) where 128 fit without spills. kTokens > 2 (the
// 8-token kernel, 152-164 registers, 3 blocks an SM): x is quant_round_inputs' buffer (per
// token and group 8 code words, even inputs then odd, and after all the words the (scale, sum)
// pairs), the values each block would compute with round_inputs, computed once a product
// instead of once a block: at 8 tokens rounding in every block cost more than the products
// (docs/PERFORMANCE.md, "Where a q4 batch-1 step's time goes").
template <class T, int kBlock, int kTokens, bool kGated, bool kFine, int kNorm>
__global__ void __launch_bounds__(kWarps * 32, kTokens <= 2 ? 4 : 3)
    quant_gemv_dp4a_kernel(const T* __restrict__ x, int tokens, const unsigned* __restrict__ codes,
                           const unsigned* __restrict__ headers, int out, int in,
                           float* __restrict__ y, int ldy, int act, T* __restrict__ act_out,
                           QuantNormArgs norm, bool release) {
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int groups = in / 32;
  const int tiles = (groups + 31) / 32;
  const std::size_t row_words = (static_cast<std::size_t>(groups) * 4 + 3) / 4 * 4;
  const int row_blocks = in / kBlock;
  // Gated: rows r < kRows / 2 are gate rows, the others the up rows that match them.
  const int width = kGated ? out / 2 : out;
  const int first = static_cast<int>(blockIdx.x) * (kGated ? kRows / 2 : kRows);
  auto row_of = [&](int r) {
    if constexpr (kGated) {
      const int i = min(first + r % (kRows / 2), width - 1);
      return static_cast<std::size_t>(r < kRows / 2 ? i : width + i);
    } else {
      return static_cast<std::size_t>(min(first + r, out - 1));
    }
  };

  float acc[kRows][kTokens] = {};
  // A tile's group `lane` for the kRows rows: its code words and its block header.
  unsigned w[kRows][4], head[kRows];
  auto load_tile = [&](int tile, int n) {
    const int g = tile * 32 + lane;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const std::size_t row = row_of(r);
      load_group<4>(codes + row * row_words + static_cast<std::size_t>(tile) * 32 * 4, n, lane,
                    w[r]);
      head[r] = __ldg(headers + row * row_blocks + g * 32 / kBlock);
    }
  };
  // Programmatic dependent launch: the first tile's weights before the wait, x after.
  if (warp < tiles && lane < min(32, groups - warp * 32))
    load_tile(warp, min(32, groups - warp * 32));
  detail::grid_dependency_wait_then_release(release);
  // kNormIn: this thread's share of the producer's sums of squares (up to kPre each token, the
  // hidden sizes to 4096), loaded now and added at the end, so their latency overlaps the
  // product; more come in at the end.
  constexpr int kPre = 4;
  float pre[kTokens][kPre];
  if constexpr (kNorm == kNormIn) {
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
#pragma unroll
      for (int j = 0; j < kPre; ++j) {
        const int i = static_cast<int>(threadIdx.x) + j * kWarps * 32;
        pre[t][j] = t < tokens && i < norm.count
                        ? norm.in_squares[static_cast<std::size_t>(t) * norm.count + i]
                        : 0.0f;
      }
    }
  }

  for (int tile = warp; tile < tiles; tile += kWarps) {
    const int n = min(32, groups - tile * 32);
    if (lane >= n) continue;
    if (tile != warp) load_tile(tile, n);
    const T* xg = x + static_cast<std::size_t>(tile * 32 + lane) * 32;
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      if (t >= tokens) continue;
      unsigned xe[4], xo[4], re[4], ro[4];
      float s, sum;
      if constexpr (kTokens > 2) {
        const std::size_t at = static_cast<std::size_t>(t) * groups + tile * 32 + lane;
        const auto* words = reinterpret_cast<const uint4*>(x);
        const uint4 e = __ldg(words + 2 * at), o = __ldg(words + 2 * at + 1);
        const float2 ss = __ldg(
            reinterpret_cast<const float2*>(words + 2 * static_cast<std::size_t>(tokens) * groups) +
            at);
        xe[0] = e.x, xe[1] = e.y, xe[2] = e.z, xe[3] = e.w;
        xo[0] = o.x, xo[1] = o.y, xo[2] = o.z, xo[3] = o.w;
        s = ss.x;
        sum = ss.y;
      } else {
        round_inputs<T, kFine>(xg + static_cast<std::size_t>(t) * in, xe, xo, re, ro, s, sum);
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        int even = 0, odd = 0;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          even = dot4_us(w[r][c] & 0x0f0f0f0fu, xe[c], even);
          odd = dot4_us(w[r][c] & 0xf0f0f0f0u, xo[c], odd);  // 16 q per odd code
        }
        float qx = fmaf(static_cast<float>(odd), 1.0f / 16.0f, static_cast<float>(even));
        if constexpr (kFine) {
          int even2 = 0, odd2 = 0;
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            even2 = dot4_us(w[r][c] & 0x0f0f0f0fu, re[c], even2);
            odd2 = dot4_us(w[r][c] & 0xf0f0f0f0u, ro[c], odd2);
          }
          qx = fmaf(fmaf(static_cast<float>(odd2), 1.0f / 16.0f, static_cast<float>(even2)),
                    1.0f / 254.0f, qx);
        }
        const float2 sm = header_floats(head[r]);
        acc[r][t] = fmaf(sm.x * s, qx, fmaf(sm.y, sum, acc[r][t]));
      }
    }
  }

  __shared__ float partial[kWarps][kRows][kTokens];
  warp_partials(acc, partial[warp], lane);
  // kNormIn: 1 / rms per token, the producer's sums added in a fixed order.
  __shared__ float inv_rms[kTokens], warp_squares[kWarps][kTokens];
  if constexpr (kNorm == kNormIn) {
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      float squares = 0.0f;
#pragma unroll
      for (int j = 0; j < kPre; ++j)
        squares += pre[t][j];
      if (t < tokens) {
        for (int i = static_cast<int>(threadIdx.x) + kPre * kWarps * 32; i < norm.count;
             i += kWarps * 32)
          squares += norm.in_squares[static_cast<std::size_t>(t) * norm.count + i];
      }
      const float v = detail::warp_sum(squares);
      if (lane == 0) warp_squares[warp][t] = v;
    }
  }
  __syncthreads();
  if constexpr (kNorm == kNormIn) {
    if (threadIdx.x < kTokens) {
      float total = 0.0f;
#pragma unroll
      for (int k = 0; k < kWarps; ++k)
        total += warp_squares[k][threadIdx.x];
      inv_rms[threadIdx.x] = rsqrtf(total / static_cast<float>(norm.n) + norm.eps);
    }
    __syncthreads();
  }
  constexpr int kOut = kGated ? kRows / 2 : kRows;
  __shared__ float out_squares[kOut][kTokens];
  for (int i = static_cast<int>(threadIdx.x); i < kOut * kTokens; i += kWarps * 32) {
    const int r = i / kTokens, t = i % kTokens;
    if (first + r >= width || t >= tokens) {
      if constexpr (kNorm == kNormOut) out_squares[r][t] = 0.0f;
      continue;
    }
    float v = 0.0f;
#pragma unroll
    for (int k = 0; k < kWarps; ++k)
      v += partial[k][r][t];
    if constexpr (kNorm == kNormIn) v *= inv_rms[t];
    if constexpr (kGated) {
      float up = 0.0f;
#pragma unroll
      for (int k = 0; k < kWarps; ++k)
        up += partial[k][r + kRows / 2][t];
      if constexpr (kNorm == kNormIn) up *= inv_rms[t];
      act_out[static_cast<std::size_t>(t) * width + first + r] =
          detail::from_float<T>(detail::activate(static_cast<ActivationKind>(act), v) * up);
    } else if constexpr (kNorm == kNormOut) {
      const std::size_t at = static_cast<std::size_t>(t) * out + first + r;
      const float sum = norm.residual[at] + v;
      norm.residual[at] = sum;
      static_cast<T*>(norm.scaled)[at] = detail::from_float<T>(sum * norm.weight[first + r]);
      out_squares[r][t] = sum * sum;
    } else {
      y[static_cast<std::size_t>(t) * ldy + first + r] = v;
    }
  }
  if constexpr (kNorm == kNormOut) {
    __syncthreads();
    if (static_cast<int>(threadIdx.x) < tokens) {
      float total = 0.0f;
#pragma unroll
      for (int r = 0; r < kOut; ++r)
        total += out_squares[r][threadIdx.x];
      norm.out_squares[static_cast<std::size_t>(threadIdx.x) * gridDim.x + blockIdx.x] = total;
    }
  }
}

// quant_round_inputs' kernel: a thread per (token, group of 32 inputs).
template <class T>
__global__ void round_inputs_kernel(const T* __restrict__ x, int tokens, int groups,
                                    uint4* __restrict__ words) {
  detail::grid_dependency_wait();
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= tokens * groups) return;
  unsigned xe[4], xo[4], re[4], ro[4];
  float s, sum;
  round_inputs<T, false>(x + static_cast<std::size_t>(i) * 32, xe, xo, re, ro, s, sum);
  words[2 * i] = make_uint4(xe[0], xe[1], xe[2], xe[3]);
  words[2 * i + 1] = make_uint4(xo[0], xo[1], xo[2], xo[3]);
  reinterpret_cast<float2*>(words + 2 * static_cast<std::size_t>(tokens) * groups)[i] =
      make_float2(s, sum);
}

template <class T, int kBlock, int kTokens, bool kFine, int kNorm>
void launch_dp4a(const void* x, int tokens, const QuantMatrixView& w, float* y, int ldy, int act,
                 void* act_out, const QuantNormArgs& norm, cudaStream_t stream) {
  const QuantMatrixLayout layout = quant_matrix_layout(w.format, static_cast<std::size_t>(w.rows),
                                                       static_cast<std::size_t>(w.cols));
  const auto* base = static_cast<const unsigned char*>(w.data);
  const auto* codes = reinterpret_cast<const unsigned*>(base);
  const auto* headers = reinterpret_cast<const unsigned*>(base + layout.header_offset());
  const bool release = detail::release_early(detail::kReleaseQuantGemv);
  if (act >= 0) {
    if constexpr (kNorm != kNormOut) {
      const int grid = (w.rows / 2 + kRows / 2 - 1) / (kRows / 2);
      detail::launch_with(detail::pdl_products_enabled(),
                          quant_gemv_dp4a_kernel<T, kBlock, kTokens, true, kFine, kNorm>, grid,
                          kWarps * 32, 0, stream, static_cast<const T*>(x), tokens, codes, headers,
                          w.rows, w.cols, y, ldy, act, static_cast<T*>(act_out), norm, release);
    }
  } else {
    const int grid = (w.rows + kRows - 1) / kRows;
    detail::launch_with(detail::pdl_products_enabled(),
                        quant_gemv_dp4a_kernel<T, kBlock, kTokens, false, kFine, kNorm>, grid,
                        kWarps * 32, 0, stream, static_cast<const T*>(x), tokens, codes, headers,
                        w.rows, w.cols, y, ldy, act, static_cast<T*>(act_out), norm, release);
  }
}

template <class T, int kBlock, int kTokens, int kNorm>
void launch_fine(const void* x, int tokens, const QuantMatrixView& w, float* y, int ldy, int act,
                 void* act_out, const QuantNormArgs& norm, cudaStream_t stream) {
  if (quant_gemv_dp4a_fine()) {
    launch_dp4a<T, kBlock, kTokens, true, kNorm>(x, tokens, w, y, ldy, act, act_out, norm, stream);
  } else {
    launch_dp4a<T, kBlock, kTokens, false, kNorm>(x, tokens, w, y, ldy, act, act_out, norm, stream);
  }
}

// 1 and 2 tokens round x in the kernel; 3-8 (`x`: quant_round_inputs' buffer) go through the
// 8-token kernel, which reads it rounded (tokens past `tokens` skipped; no remainders). The
// norms (kNorm) only at 1-2 tokens (QuantNormArgs).
template <class T, int kBlock, int kNorm>
void dispatch_tokens(const void* x, int tokens, const QuantMatrixView& w, float* y, int ldy,
                     int act, void* act_out, const QuantNormArgs& norm, cudaStream_t stream) {
  if (tokens == 1) {
    launch_fine<T, kBlock, 1, kNorm>(x, tokens, w, y, ldy, act, act_out, norm, stream);
  } else if (tokens == 2 || kNorm != kNormNone) {
    launch_fine<T, kBlock, 2, kNorm>(x, tokens, w, y, ldy, act, act_out, norm, stream);
  } else if constexpr (kNorm == kNormNone) {
    launch_dp4a<T, kBlock, kQuantGemvMaxTokens, false, kNorm>(x, tokens, w, y, ldy, act, act_out,
                                                              norm, stream);
  }
}

template <int kNorm>
void dispatch(const void* x, int tokens, const QuantMatrixView& w, float* y, int ldy, int act,
              void* act_out, const QuantNormArgs& norm, Precision precision, cudaStream_t stream) {
  WEFT_DISPATCH_PRECISION(precision, {
    if (w.format == QuantGemvFormat::kQ4B32) {
      dispatch_tokens<T, 32, kNorm>(x, tokens, w, y, ldy, act, act_out, norm, stream);
    } else {
      dispatch_tokens<T, 64, kNorm>(x, tokens, w, y, ldy, act, act_out, norm, stream);
    }
  });
}

}  // namespace

bool quant_gemv_dp4a_fine() {
  static const bool on = [] {
    const char* v = std::getenv("WEFT_QUANT_DP4A_FINE");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

bool quant_gemv_dp4a_supported(QuantGemvFormat format, int tokens) {
  return (format == QuantGemvFormat::kQ4B32 || format == QuantGemvFormat::kQ4B64) && tokens >= 1 &&
         tokens <= 2;
}

void quant_gemv_dp4a(const void* x, int tokens, const QuantMatrixView& w, float* y, int ldy,
                     int act, void* act_out, Precision precision, cudaStream_t stream) {
  if (tokens <= 0 || w.rows <= 0) return;
  // Raw x never reaches the 8-token kernel, which reads quant_round_inputs' buffer; callers come
  // through quant_gemv_resolve, which gives dp4a 1-2 tokens only (quant_gemv_dp4a_supported).
  dispatch<kNormNone>(x, std::min(tokens, 2), w, y, ldy, act, act_out, {}, precision, stream);
}

std::size_t quant_rounded_inputs_bytes(int tokens, int cols) {
  return static_cast<std::size_t>(std::max(tokens, 0)) * (cols / 32) * (32 + 8);
}

void quant_round_inputs(const void* x, int tokens, int cols, void* rounded, Precision precision,
                        cudaStream_t stream) {
  const int groups = cols / 32, n = tokens * groups;
  if (n <= 0) return;
  WEFT_DISPATCH_PRECISION(precision, {
    detail::launch_with(detail::pdl_products_enabled(), round_inputs_kernel<T>, (n + 127) / 128,
                        128, 0, stream, static_cast<const T*>(x), tokens, groups,
                        static_cast<uint4*>(rounded));
  });
}

void quant_gemv_dp4a_rounded(const void* rounded, int tokens, const QuantMatrixView& w, float* y,
                             int ldy, int act, void* act_out, Precision precision,
                             cudaStream_t stream) {
  if (tokens <= 2 || tokens > kQuantGemvMaxTokens || w.rows <= 0) return;
  dispatch<kNormNone>(rounded, tokens, w, y, ldy, act, act_out, {}, precision, stream);
}

int quant_norm_squares(int rows) {
  return (rows + kRows - 1) / kRows;
}

void quant_gemv_dp4a_norm_out(const void* x, int tokens, const QuantMatrixView& w,
                              const QuantNormArgs& norm, Precision precision, cudaStream_t stream) {
  if (tokens <= 0 || w.rows <= 0) return;
  dispatch<kNormOut>(x, tokens, w, nullptr, 0, -1, nullptr, norm, precision, stream);
}

void quant_gemv_dp4a_norm_in(const void* x, int tokens, const QuantMatrixView& w, float* y, int ldy,
                             int act, void* act_out, const QuantNormArgs& norm, Precision precision,
                             cudaStream_t stream) {
  if (tokens <= 0 || w.rows <= 0) return;
  dispatch<kNormIn>(x, tokens, w, y, ldy, act, act_out, norm, precision, stream);
}

}  // namespace weft::cuda
