#pragma once
// Fixtures of the quantized-product tests (cuda_quant_layout_test.cpp, cuda_quant_norm_test.cpp):
// random rows quantized by the CPU reference in each block format, their GPU image, device
// uploads, and the bound of the dp4a kernel's rounded inputs.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/quant/codec.hpp"
#include "kernels/cpu/vector_math.hpp"
#include "kernels/cuda/quant_gemv.hpp"
#include "kernels/cuda/quant_layout.hpp"

namespace weft::cuda::quant_test {

inline quant::QuantType cpu_type(QuantGemvFormat f) {
  return static_cast<quant::QuantType>(static_cast<int>(f) + 1);
}

inline std::vector<QuantGemvFormat> all_formats() {
  std::vector<QuantGemvFormat> out;
  for (int i = 0; i < kQuantGemvFormats; ++i)
    out.push_back(static_cast<QuantGemvFormat>(i));
  return out;
}

inline std::string name_of(QuantGemvFormat f) {
  return std::string(quant::quant_info(cpu_type(f)).name);
}

// A host image of the device allocation.
struct HostMatrix {
  QuantMatrixLayout layout;
  std::vector<std::uint32_t> words;  // codes, then headers
  std::uint32_t* codes() { return words.data(); }
  std::uint32_t* headers() { return words.data() + layout.header_offset() / 4; }
};

inline HostMatrix repack(QuantGemvFormat f, const std::vector<std::uint8_t>& cpu, std::size_t rows,
                         std::size_t cols) {
  HostMatrix m;
  m.layout = quant_matrix_layout(f, rows, cols);
  m.words.assign(m.layout.total_bytes() / 4, 0xdeadbeefu);
  quant_repack_rows(m.layout, cpu.data(), 0, rows, m.codes(), m.headers());
  return m;
}

template <class T>
T* upload(const std::vector<T>& host) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  return static_cast<T*>(p);
}

// Random rows quantized by the CPU reference, their dequantized values, and the GPU image.
struct Weights {
  std::vector<std::uint8_t> cpu;
  std::vector<float> dequantized;
  HostMatrix gpu;
};

inline Weights make_weights(QuantGemvFormat f, int rows, int cols, std::mt19937& rng) {
  const quant::QuantType type = cpu_type(f);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const std::size_t stride = quant::row_bytes(type, static_cast<std::size_t>(cols));
  Weights w;
  w.cpu.resize(static_cast<std::size_t>(rows) * stride);
  w.dequantized.resize(static_cast<std::size_t>(rows) * cols);
  std::vector<float> row(static_cast<std::size_t>(cols));
  for (int r = 0; r < rows; ++r) {
    // A per-row offset, so mins are not all near zero.
    const float offset = 0.01f * static_cast<float>(r % 7 - 3);
    for (auto& v : row)
      v = offset + 0.05f * dist(rng);
    auto* at = reinterpret_cast<std::byte*>(w.cpu.data()) + static_cast<std::size_t>(r) * stride;
    quant::quantize_row(type, row.data(), static_cast<std::size_t>(cols), at);
    quant::dequantize_row(type, at, static_cast<std::size_t>(cols),
                          w.dequantized.data() + static_cast<std::size_t>(r) * cols);
  }
  w.gpu = repack(f, w.cpu, static_cast<std::size_t>(rows), static_cast<std::size_t>(cols));
  return w;
}

// The most the dp4a kernel's rounding of x can move row `row`'s sum for one token's inputs x
// (quant_gemv.hpp, kDp4a): per group of 32 inputs, half its step s = max|x| / 127 (s / 508 with
// the remainders, quant_gemv_dp4a_fine) for each weight's q * scale, which is the dequantized
// weight minus its block's min (the header's high half). With room for the fp32 roundings of
// x * 127 / max|x| (a few units of 2^-24 of each |q * scale * x|).
inline double rounded_input_bound(QuantGemvFormat format, const Weights& w, int cols, int row,
                                  const float* x) {
  const QuantMatrixLayout& layout = w.gpu.layout;
  const int block = quant_gemv_info(format).block;
  double bound = 0;
  for (int g = 0; g < cols / 32; ++g) {
    double amax = 0;
    for (int k = 32 * g; k < 32 * g + 32; ++k)
      amax = std::max(amax, static_cast<double>(std::fabs(x[k])));
    const std::uint32_t header =
        w.gpu.words[layout.header_offset() / 4 + static_cast<std::size_t>(row) * layout.row_blocks +
                    static_cast<std::size_t>(32 * g / block)];
    const double min = cpu::f16_to_f32(static_cast<std::uint16_t>(header >> 16));
    const double half_step = quant_gemv_dp4a_fine() ? amax / 127 / 508 : amax / 254;
    for (int k = 32 * g; k < 32 * g + 32; ++k) {
      const double qs = std::fabs(w.dequantized[static_cast<std::size_t>(row) * cols + k] - min);
      bound += qs * (half_step * (1 + 1e-5) + 4e-7 * std::fabs(x[k]));
    }
  }
  return bound;
}

// v as a 16-bit number in precision p (round to nearest), and such a number as a float.
inline std::uint16_t to16(Precision p, float v) {
  return p == Precision::kBF16 ? cpu::f32_to_bf16(v) : cpu::f32_to_f16(v);
}
inline float from16(Precision p, std::uint16_t bits) {
  return p == Precision::kBF16 ? cpu::bf16_to_f32(bits) : cpu::f16_to_f32(bits);
}

// n inputs drawn from dist, as 16-bit numbers in precision p (bits) and as the floats they are.
struct Inputs {
  std::vector<std::uint16_t> bits;
  std::vector<float> values;
};
inline Inputs random_inputs(std::size_t n, Precision p, std::mt19937& rng,
                            std::normal_distribution<float>& dist) {
  Inputs in{std::vector<std::uint16_t>(n), std::vector<float>(n)};
  for (std::size_t i = 0; i < n; ++i) {
    in.bits[i] = to16(p, dist(rng));
    in.values[i] = from16(p, in.bits[i]);
  }
  return in;
}

// Row o of w times the inputs x (cols of them) in fp64; `magnitude`: the sum of the products'
// magnitudes.
inline double reference_dot(const Weights& w, int cols, int o, const float* x, double& magnitude) {
  double sum = 0;
  magnitude = 0;
  for (int k = 0; k < cols; ++k) {
    const double p =
        static_cast<double>(x[k]) * w.dequantized[static_cast<std::size_t>(o) * cols + k];
    sum += p;
    magnitude += std::fabs(p);
  }
  return sum;
}

}  // namespace weft::cuda::quant_test
