// One-token products (decode) on the CPU per weight format: bf16 through cpu::matmul's dot,
// every block format through the dequantize-fused quant_dot (docs/quantization.md), on one
// thread. Prints the best of 20 runs and the weight bytes streamed per second.
//
//   cpu_quant_gemv_bench [ROWS COLS]      (default 8192 4096: 64 MB of bf16, beyond the caches)

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

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
  std::printf("%zu x %zu, one thread, kernels %s\n", rows, cols,
              cpu::resolve(cpu::KernelPath::kAuto) == cpu::KernelPath::kAvx2 ? "avx2" : "scalar");
  double bf16_ms = 0;
  auto time = [&](const cpu::WeightMatrix& m, const std::string& name) {
    double best = 1e9;
    for (int r = 0; r < 20; ++r) {
      const auto start = std::chrono::steady_clock::now();
      cpu::matmul(x.data(), 1, m, nullptr, y.data(), nullptr);
      best = std::min(
          best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    if (name == "bf16") bf16_ms = best * 1e3;
    std::printf("%-8s %8.3f ms  %6.2f GB/s  %5.2fx bf16's time\n", name.c_str(), best * 1e3,
                static_cast<double>(m.rows * m.row_bytes()) / best / 1e9, best * 1e3 / bf16_ms);
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
