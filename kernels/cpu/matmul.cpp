#include "kernels/cpu/matmul.hpp"

#include <immintrin.h>

#include <algorithm>
#include <vector>

namespace weft::cpu {
namespace {

// Multiply-adds a thread should get before another one is worth waking: below this a
// barrier costs more than the work it splits (small decode matmuls run on one thread).
constexpr std::size_t kMinWorkPerThread = std::size_t{256} * 1024;

// y[t][o + r] for 2 weight rows (r) x 4 tokens (t): 8 accumulators share each load, which is
// what makes prefill compute-bound instead of load-bound. w0/w1 are widened f32 rows.
__attribute__((target("avx2,fma"))) void dot_2x4_avx2(const float* const x[4], const float* w0,
                                                      const float* w1, std::size_t n,
                                                      float out[2][4]) {
  __m256 acc[2][4];
  for (auto& row : acc) {
    for (auto& a : row)
      a = _mm256_setzero_ps();
  }
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_loadu_ps(w0 + i);
    const __m256 b = _mm256_loadu_ps(w1 + i);
    for (int t = 0; t < 4; ++t) {
      const __m256 xv = _mm256_loadu_ps(x[t] + i);
      acc[0][t] = _mm256_fmadd_ps(a, xv, acc[0][t]);
      acc[1][t] = _mm256_fmadd_ps(b, xv, acc[1][t]);
    }
  }
  for (int r = 0; r < 2; ++r) {
    for (int t = 0; t < 4; ++t) {
      const __m128 lo = _mm256_castps256_ps128(acc[r][t]);
      const __m128 hi = _mm256_extractf128_ps(acc[r][t], 1);
      __m128 v = _mm_add_ps(lo, hi);
      v = _mm_add_ps(v, _mm_movehl_ps(v, v));
      v = _mm_add_ss(v, _mm_movehdup_ps(v));
      out[r][t] = _mm_cvtss_f32(v);
    }
  }
  for (; i < n; ++i) {
    for (int t = 0; t < 4; ++t) {
      out[0][t] += w0[i] * x[t][i];
      out[1][t] += w1[i] * x[t][i];
    }
  }
}

void matmul_rows(const float* x, std::size_t tokens, const WeightMatrix& w, const float* bias,
                 float* y, std::size_t row_begin, std::size_t row_end, KernelPath path) {
  if (tokens == 1) {
    for (std::size_t o = row_begin; o < row_end; ++o) {
      y[o] = dot(x, w.dtype, w.row(o), w.cols, path) + (bias ? bias[o] : 0.0f);
    }
    return;
  }
  // Several tokens: widen each weight row once into a buffer that stays in L1, then take its
  // dot product with every token's activations.
  thread_local std::vector<float> widened;
  const bool needs_widening = w.dtype != DType::kF32;
  if (needs_widening) widened.resize(2 * w.cols);
  std::size_t o = row_begin;
  if (path == KernelPath::kAvx2) {
    for (; o + 2 <= row_end; o += 2) {
      const float* r0 = static_cast<const float*>(w.row(o));
      const float* r1 = static_cast<const float*>(w.row(o + 1));
      if (needs_widening) {
        to_f32(w.dtype, w.row(o), widened.data(), w.cols, path);
        to_f32(w.dtype, w.row(o + 1), widened.data() + w.cols, w.cols, path);
        r0 = widened.data();
        r1 = widened.data() + w.cols;
      }
      const float b0 = bias ? bias[o] : 0.0f, b1 = bias ? bias[o + 1] : 0.0f;
      std::size_t t = 0;
      for (; t + 4 <= tokens; t += 4) {
        const float* xs[4] = {x + t * w.cols, x + (t + 1) * w.cols, x + (t + 2) * w.cols,
                              x + (t + 3) * w.cols};
        float out[2][4];
        dot_2x4_avx2(xs, r0, r1, w.cols, out);
        for (int k = 0; k < 4; ++k) {
          y[(t + k) * w.rows + o] = out[0][k] + b0;
          y[(t + k) * w.rows + o + 1] = out[1][k] + b1;
        }
      }
      for (; t < tokens; ++t) {
        y[t * w.rows + o] = dot(x + t * w.cols, DType::kF32, r0, w.cols, path) + b0;
        y[t * w.rows + o + 1] = dot(x + t * w.cols, DType::kF32, r1, w.cols, path) + b1;
      }
    }
  }
  for (; o < row_end; ++o) {
    const float* row = static_cast<const float*>(w.row(o));
    if (needs_widening) {
      to_f32(w.dtype, w.row(o), widened.data(), w.cols, path);
      row = widened.data();
    }
    const float b = bias ? bias[o] : 0.0f;
    for (std::size_t t = 0; t < tokens; ++t) {
      y[t * w.rows + o] = dot(x + t * w.cols, DType::kF32, row, w.cols, path) + b;
    }
  }
}

}  // namespace

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
