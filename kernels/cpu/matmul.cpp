#include "kernels/cpu/matmul.hpp"

#include <algorithm>
#include <vector>

namespace weft::cpu {
namespace {

// Output rows per task: enough to amortise a task's start, few enough to balance threads.
constexpr std::size_t kRowGrain = 16;

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
  if (needs_widening) widened.resize(w.cols);
  for (std::size_t o = row_begin; o < row_end; ++o) {
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
      kRowGrain);
}

}  // namespace weft::cpu
