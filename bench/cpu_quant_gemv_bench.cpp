// One-token products (decode) on the CPU per weight format: bf16 through cpu::matmul's dot,
// every block format through the dequantize-fused quant_dot (docs/quantization.md), on one
// thread. Prints the best of 20 runs and the weight bytes streamed per second, on the AVX2
// path and, where the CPU has AVX-512F, on the AVX-512 one (the quantized dot products; bf16
// runs AVX2 on both), with the second's speedup.
//
//   cpu_quant_gemv_bench [ROWS COLS]      (default 8192 4096: 64 MB of bf16, beyond the caches)

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/quant/codec.hpp"

int main(int argc, char** argv) {
  using namespace weft;
  const std::size_t rows = argc > 2 ? std::strtoul(argv[1], nullptr, 10) : 8192;
  const std::size_t cols = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 4096;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> w(rows * cols), x(cols), y(rows);
  for (auto& v : w)
    v = dist(rng);
  for (auto& v : x)
    v = dist(rng);
  std::vector<std::uint16_t> bf16(w.size());
  for (std::size_t i = 0; i < w.size(); ++i)
    bf16[i] = cpu::f32_to_bf16(w[i]);
  const bool avx512 = cpu::avx512_available();
  std::printf("%zu x %zu, one thread; cpu %s\n", rows, cols,
              cpu::describe(cpu::cpu_features()).c_str());
  std::printf("%-8s %10s %9s %9s", "format", "avx2 ms", "GB/s", "x bf16");
  if (avx512) std::printf(" %11s %9s %9s", "avx512 ms", "GB/s", "x avx2");
  std::printf("\n");
  double bf16_ms = 0;
  auto best_ms = [&](const cpu::WeightMatrix& m, cpu::KernelPath path) {
    double best = 1e9;
    for (int r = 0; r < 20; ++r) {
      const auto start = std::chrono::steady_clock::now();
      cpu::matmul(x.data(), 1, m, nullptr, y.data(), nullptr, path);
      best = std::min(
          best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return best * 1e3;
  };
  auto time = [&](const cpu::WeightMatrix& m, const std::string& name) {
    const double bytes = static_cast<double>(m.rows * m.row_bytes());
    const double ms = best_ms(m, cpu::KernelPath::kAvx2);
    if (name == "bf16") bf16_ms = ms;
    std::printf("%-8s %10.3f %9.2f %8.2fx", name.c_str(), ms, bytes / ms / 1e6, ms / bf16_ms);
    if (avx512) {
      const double ms512 = best_ms(m, cpu::KernelPath::kAvx512);
      std::printf(" %11.3f %9.2f %8.2fx", ms512, bytes / ms512 / 1e6, ms / ms512);
    }
    std::printf("\n");
    std::fflush(stdout);
  };
  time({DType::kBF16, bf16.data(), rows, cols}, "bf16");
  for (const auto type : quant::all_quant_types()) {
    const std::size_t stride = quant::row_bytes(type, cols);
    std::vector<std::byte> q(rows * stride);
    for (std::size_t r = 0; r < rows; ++r)
      quant::quantize_row(type, w.data() + r * cols, cols, q.data() + r * stride);
    time({DType::kU8, q.data(), rows, cols, type}, std::string(quant::quant_info(type).name));
  }
  return 0;
}
