// The first CUDA dequantize-fused products (kernels/cuda/quant_gemv_blocks.hpp, the reference
// kept for the bench) against the CPU reference (kernels/cpu/quant/codec.hpp's
// dequantize_row, then an fp64 product) for q8_b32 and q4_b32, bf16 and fp16 activations, 1
// to 8 tokens and awkward row counts. Skips without a GPU. The model's kernels (quant_gemv.hpp)
// are tested in cuda_quant_layout_test.cpp.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/quant/codec.hpp"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/quant_gemv_blocks.hpp"
#include "tests/kernels/cuda_quant_fixtures.hpp"
#include "tests/kernels/cuda_test_buffer.hpp"

namespace weft::cuda {
namespace {

struct Case {
  QuantBlocksFormat format;
  Precision precision;
};

class CudaQuantGemvBlocks : public test_support::GpuTest<Case> {};

using quant_test::random_inputs;
using quant_test::upload;

TEST_P(CudaQuantGemvBlocks, MatchesDequantizeThenProduct) {
  const auto [format, precision] = GetParam();
  const quant::QuantType type =
      format == QuantBlocksFormat::kQ8B32 ? quant::QuantType::kQ8B32 : quant::QuantType::kQ4B32;
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto [tokens, rows, cols] : {std::tuple<int, int, int>{1, 1, 32},
                                    {1, 37, 4096},
                                    {1, 1000, 96},
                                    {2, 65, 1024},
                                    {3, 9, 2080},
                                    {8, 130, 512}}) {
    const std::size_t stride = quant_blocks_row_bytes(format, cols);
    ASSERT_EQ(stride, quant::row_bytes(type, static_cast<std::size_t>(cols)));
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(rows) * stride);
    std::vector<float> dequantized(static_cast<std::size_t>(rows) * cols), row(cols);
    for (int r = 0; r < rows; ++r) {
      for (auto& v : row)
        v = 0.05f * dist(rng);
      auto* at = reinterpret_cast<std::byte*>(bytes.data()) + r * stride;
      quant::quantize_row(type, row.data(), cols, at);
      quant::dequantize_row(type, at, cols,
                            dequantized.data() + static_cast<std::size_t>(r) * cols);
    }
    const auto [x16, x] =
        random_inputs(static_cast<std::size_t>(tokens) * cols, precision, rng, dist);
    auto* dx = upload(x16);
    auto* dw = upload(bytes);
    void* raw_y = nullptr;
    ASSERT_EQ(cudaMalloc(&raw_y, sizeof(float) * tokens * rows), cudaSuccess);
    auto* dy = static_cast<float*>(raw_y);
    ASSERT_TRUE(quant_blocks_supported(dx, tokens, dw, cols));
    quant_gemv_blocks(dx, tokens, dw, format, rows, cols, dy, rows, precision, nullptr);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    std::vector<float> y(static_cast<std::size_t>(tokens) * rows);
    ASSERT_EQ(cudaMemcpy(y.data(), dy, sizeof(float) * y.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dy);
    for (int t = 0; t < tokens; ++t) {
      for (int o = 0; o < rows; ++o) {
        double want = 0, magnitude = 0;
        for (int k = 0; k < cols; ++k) {
          const double p = static_cast<double>(x[static_cast<std::size_t>(t) * cols + k]) *
                           dequantized[static_cast<std::size_t>(o) * cols + k];
          want += p;
          magnitude += std::fabs(p);
        }
        ASSERT_NEAR(y[static_cast<std::size_t>(t) * rows + o], want, 1e-5 * magnitude + 1e-6)
            << "tokens=" << tokens << " rows=" << rows << " cols=" << cols << " t=" << t
            << " o=" << o;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaQuantGemvBlocks,
                         ::testing::Values(Case{QuantBlocksFormat::kQ8B32, Precision::kBF16},
                                           Case{QuantBlocksFormat::kQ8B32, Precision::kF16},
                                           Case{QuantBlocksFormat::kQ4B32, Precision::kBF16},
                                           Case{QuantBlocksFormat::kQ4B32, Precision::kF16}));

}  // namespace
}  // namespace weft::cuda
