#include "kernels/cpu/matmul.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/quant/quant_dot.hpp"

namespace weft::cpu {
namespace {

// Multiply-adds a thread should get before another one is worth waking: below this a
// barrier costs more than the work it splits (small decode matmuls run on one thread).
constexpr std::size_t kMinWorkPerThread = std::size_t{256} * 1024;

// Every y[t, o] of the AVX2 path is summed in one order, whichever kernel below computes it:
// one 8-lane accumulator over the blocks of 8 columns, the same horizontal sum, then the
// remaining columns one fused multiply-add at a time, then the bias. So a token's outputs
// keep their bits whatever the number of tokens in the call, its place among them and the
// split of rows over threads: a request gives the same logits alone or batched, which seeded
// sampling needs (docs/reliability.md). The kernels differ only in how many rows (R) and
// tokens (T) share each load.

template <DType D>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline __m256 load8(const void* p,
                                                                            std::size_t i) {
  if constexpr (D == DType::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(p) + i)));
  } else if constexpr (D == DType::kBF16) {
    const __m128i raw =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(p) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
  } else {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  }
}

template <DType D>
inline float load1(const void* p, std::size_t i) {
  if constexpr (D == DType::kF16) {
    return f16_to_f32(static_cast<const std::uint16_t*>(p)[i]);
  } else if constexpr (D == DType::kBF16) {
    return bf16_to_f32(static_cast<const std::uint16_t*>(p)[i]);
  } else {
    return static_cast<const float*>(p)[i];
  }
}

// out[r][t] = sum_i w[r][i] * x[t][i] in the order above. R x T accumulators share each load:
// 2 x 4 is what makes prefill compute-bound instead of load-bound; 4 x 1 gives a decode step
// four independent FMA chains.
template <int R, int T, DType D>
__attribute__((target("avx2,fma,f16c"))) void dot_block(const float* const x[T],
                                                        const void* const w[R], std::size_t n,
                                                        float out[R][T]) {
  __m256 acc[R][T];
  for (auto& row : acc) {
    for (auto& a : row)
      a = _mm256_setzero_ps();
  }
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 wv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      wv[r] = load8<D>(w[r], i);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m256 xv = _mm256_loadu_ps(x[t] + i);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r)
        acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      const __m128 lo = _mm256_castps256_ps128(acc[r][t]);
      const __m128 hi = _mm256_extractf128_ps(acc[r][t], 1);
      __m128 v = _mm_add_ps(lo, hi);
      v = _mm_add_ps(v, _mm_movehl_ps(v, v));
      v = _mm_add_ss(v, _mm_movehdup_ps(v));
      float sum = _mm_cvtss_f32(v);
      for (std::size_t k = i; k < n; ++k)
        sum = std::fma(load1<D>(w[r], k), x[t][k], sum);
      out[r][t] = sum;
    }
  }
}

// One token (a decode step): rows four at a time, read straight from the weights (f16 and
// bf16 widened in registers).
template <DType D>
void matmul_one_token_avx2(const float* x, const WeightMatrix& w, const float* bias, float* y,
                           std::size_t row_begin, std::size_t row_end) {
  const float* xs[1] = {x};
  std::size_t o = row_begin;
  for (; o + 4 <= row_end; o += 4) {
    const void* rows[4] = {w.row(o), w.row(o + 1), w.row(o + 2), w.row(o + 3)};
    float out[4][1];
    dot_block<4, 1, D>(xs, rows, w.cols, out);
    for (int r = 0; r < 4; ++r)
      y[o + r] = out[r][0] + (bias ? bias[o + r] : 0.0f);
  }
  for (; o < row_end; ++o) {
    const void* rows[1] = {w.row(o)};
    float out[1][1];
    dot_block<1, 1, D>(xs, rows, w.cols, out);
    y[o] = out[0][0] + (bias ? bias[o] : 0.0f);
  }
}

// R widened rows (R = 1 or 2) against every token, four tokens at a time.
template <int R>
void rows_times_tokens_avx2(const float* x, std::size_t tokens, std::size_t cols,
                            const float* const rows[R], const float* bias, std::size_t o,
                            std::size_t out_stride, float* y) {
  const void* w[R];
  for (int r = 0; r < R; ++r)
    w[r] = rows[r];
  std::size_t t = 0;
  for (; t + 4 <= tokens; t += 4) {
    const float* xs[4] = {x + t * cols, x + (t + 1) * cols, x + (t + 2) * cols, x + (t + 3) * cols};
    float out[R][4];
    dot_block<R, 4, DType::kF32>(xs, w, cols, out);
    for (int r = 0; r < R; ++r) {
      for (int k = 0; k < 4; ++k)
        y[(t + k) * out_stride + o + r] = out[r][k] + (bias ? bias[o + r] : 0.0f);
    }
  }
  for (; t < tokens; ++t) {
    const float* xs[1] = {x + t * cols};
    float out[R][1];
    dot_block<R, 1, DType::kF32>(xs, w, cols, out);
    for (int r = 0; r < R; ++r)
      y[t * out_stride + o + r] = out[r][0] + (bias ? bias[o + r] : 0.0f);
  }
}

void matmul_rows_avx2(const float* x, std::size_t tokens, const WeightMatrix& w, const float* bias,
                      float* y, std::size_t row_begin, std::size_t row_end) {
  if (tokens == 1) {
    switch (w.dtype) {
      case DType::kF16:
        return matmul_one_token_avx2<DType::kF16>(x, w, bias, y, row_begin, row_end);
      case DType::kBF16:
        return matmul_one_token_avx2<DType::kBF16>(x, w, bias, y, row_begin, row_end);
      default:
        return matmul_one_token_avx2<DType::kF32>(x, w, bias, y, row_begin, row_end);
    }
  }
  // Several tokens: widen each weight row once into a buffer that stays in L1, then take its
  // dot product with every token's activations.
  thread_local std::vector<float> widened;
  const bool needs_widening = w.dtype != DType::kF32;
  if (needs_widening) widened.resize(2 * w.cols);
  auto widened_row = [&](std::size_t o, int slot) {
    if (!needs_widening) return static_cast<const float*>(w.row(o));
    float* dst = widened.data() + static_cast<std::size_t>(slot) * w.cols;
    to_f32(w.dtype, w.row(o), dst, w.cols, KernelPath::kAvx2);
    return static_cast<const float*>(dst);
  };
  std::size_t o = row_begin;
  for (; o + 2 <= row_end; o += 2) {
    const float* rows[2] = {widened_row(o, 0), widened_row(o + 1, 1)};
    rows_times_tokens_avx2<2>(x, tokens, w.cols, rows, bias, o, w.rows, y);
  }
  if (o < row_end) {
    const float* rows[1] = {widened_row(o, 0)};
    rows_times_tokens_avx2<1>(x, tokens, w.cols, rows, bias, o, w.rows, y);
  }
}

void widen_row(const WeightMatrix& w, std::size_t r, float* dst, KernelPath path) {
  if (w.quantized()) {
    quant_to_f32(w.quant, static_cast<const std::byte*>(w.row(r)), w.cols, dst, path);
  } else {
    to_f32(w.dtype, w.row(r), dst, w.cols, path);
  }
}

// Block-quantized weights (quant/format.hpp): one token through the fused quant_dot_rows;
// several by dequantizing each row once into a buffer that stays in L1.
void matmul_rows_quantized(const float* x, std::size_t tokens, const WeightMatrix& w,
                           const float* bias, float* y, std::size_t row_begin, std::size_t row_end,
                           KernelPath path) {
  if (tokens == 1) {
    quant_dot_rows(x, w.quant, static_cast<const std::byte*>(w.row(row_begin)), w.row_bytes(),
                   row_end - row_begin, w.cols, y + row_begin, path);
    if (bias != nullptr) {
      for (std::size_t o = row_begin; o < row_end; ++o)
        y[o] += bias[o];
    }
    return;
  }
  thread_local std::vector<float> widened;
  widened.resize(w.cols);
  for (std::size_t o = row_begin; o < row_end; ++o) {
    const float b = bias ? bias[o] : 0.0f;
    widen_row(w, o, widened.data(), path);
    for (std::size_t t = 0; t < tokens; ++t)
      y[t * w.rows + o] = dot(x + t * w.cols, DType::kF32, widened.data(), w.cols, path) + b;
  }
}

// The scalar path sums every y[t, o] with dot()'s one scalar loop, so it too is the same
// whatever the batch.
void matmul_rows(const float* x, std::size_t tokens, const WeightMatrix& w, const float* bias,
                 float* y, std::size_t row_begin, std::size_t row_end, KernelPath path) {
  if (w.quantized()) {
    return matmul_rows_quantized(x, tokens, w, bias, y, row_begin, row_end, path);
  }
  if (runs_avx2(path)) return matmul_rows_avx2(x, tokens, w, bias, y, row_begin, row_end);
  thread_local std::vector<float> widened;
  const bool needs_widening = w.dtype != DType::kF32 && tokens > 1;
  if (needs_widening) widened.resize(w.cols);
  for (std::size_t o = row_begin; o < row_end; ++o) {
    const void* row = w.row(o);
    DType dtype = w.dtype;
    if (needs_widening) {
      to_f32(w.dtype, row, widened.data(), w.cols, path);
      row = widened.data();
      dtype = DType::kF32;
    }
    const float b = bias ? bias[o] : 0.0f;
    for (std::size_t t = 0; t < tokens; ++t) {
      y[t * w.rows + o] = dot(x + t * w.cols, dtype, row, w.cols, path) + b;
    }
  }
}

}  // namespace

void weight_row_to_f32(const WeightMatrix& w, std::size_t r, float* dst, KernelPath path) {
  widen_row(w, r, dst, resolve(path));
}

void matmul(const float* x, std::size_t tokens, const WeightMatrix& w, const float* bias, float* y,
            ThreadPool* pool, KernelPath path) {
  path = resolve(path);
  if (pool == nullptr) return matmul_rows(x, tokens, w, bias, y, 0, w.rows, path);
  pool->parallel_for(
      w.rows,
      [&](std::size_t begin, std::size_t end) {
        matmul_rows(x, tokens, w, bias, y, begin, end, path);
      },
      std::max<std::size_t>(16, kMinWorkPerThread / std::max<std::size_t>(1, w.cols * tokens)));
}

void matmul_group(const float* x, std::size_t tokens, std::span<const MatmulOutput> outputs,
                  ThreadPool* pool, KernelPath path) {
  path = resolve(path);
  std::size_t total = 0, cols = 1;
  for (const auto& out : outputs) {
    total += out.w->rows;
    cols = out.w->cols;
  }
  auto run = [&](std::size_t begin, std::size_t end) {
    std::size_t offset = 0;
    for (const auto& out : outputs) {
      const std::size_t lo = std::max(begin, offset), hi = std::min(end, offset + out.w->rows);
      if (lo < hi) matmul_rows(x, tokens, *out.w, out.bias, out.y, lo - offset, hi - offset, path);
      offset += out.w->rows;
    }
  };
  if (pool == nullptr) return run(0, total);
  pool->parallel_for(
      total, run,
      std::max<std::size_t>(16, kMinWorkPerThread / std::max<std::size_t>(1, cols * tokens)));
}

}  // namespace weft::cpu
