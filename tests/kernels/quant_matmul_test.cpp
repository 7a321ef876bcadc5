// Dequantize-fused CPU products (kernels/cpu/quant/quant_dot.hpp through matmul) against
// dequantize-then-f32: every format, scalar, AVX2 and AVX-512 paths, one token (the fused dot)
// and several (the widened rows), on sizes with partial blocks.

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/quant/codec.hpp"
#include "kernels/cpu/quant/quant_dot.hpp"

namespace weft::cpu {
namespace {

using quant::QuantType;

struct QuantizedMatrix {
  std::vector<std::byte> bytes;
  std::vector<float> dequantized;  // [rows, cols]
  WeightMatrix w;
};

QuantizedMatrix make_matrix(QuantType type, std::size_t rows, std::size_t cols, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 0.1f);
  QuantizedMatrix m;
  const std::size_t stride = quant::row_bytes(type, cols);
  m.bytes.resize(rows * stride);
  m.dequantized.resize(rows * cols);
  std::vector<float> row(cols);
  for (std::size_t r = 0; r < rows; ++r) {
    for (auto& v : row)
      v = dist(rng);
    quant::quantize_row(type, row.data(), cols, m.bytes.data() + r * stride);
    quant::dequantize_row(type, m.bytes.data() + r * stride, cols, m.dequantized.data() + r * cols);
  }
  m.w = WeightMatrix{DType::kU8, m.bytes.data(), rows, cols, type};
  return m;
}

class QuantMatmulTest : public ::testing::TestWithParam<std::tuple<QuantType, KernelPath>> {};

TEST_P(QuantMatmulTest, MatchesDequantizeThenF32Matmul) {
  const auto [type, path] = GetParam();
  if (path == KernelPath::kAvx2 && !avx2_available()) GTEST_SKIP() << "no AVX2/FMA/F16C";
  if (path == KernelPath::kAvx512 && !avx512_available()) GTEST_SKIP() << "no AVX-512F";
  std::mt19937 rng(5);
  ThreadPool pool(3);
  for (auto [tokens, rows, cols] : {std::tuple<std::size_t, std::size_t, std::size_t>{1, 1, 32},
                                    {1, 37, 200},
                                    {1, 9, 7},
                                    {1, 7, 256},
                                    {1, 3, 4096},
                                    {2, 13, 64},
                                    {3, 65, 130},
                                    {5, 17, 256},
                                    {6, 20, 96}}) {
    const QuantizedMatrix m = make_matrix(type, rows, cols, rng);
    const WeightMatrix reference{DType::kF32, m.dequantized.data(), rows, cols};
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(tokens * cols), bias(rows), got(tokens * rows), want(tokens * rows);
    for (auto& v : x)
      v = dist(rng);
    for (auto& v : bias)
      v = dist(rng);
    matmul(x.data(), tokens, m.w, bias.data(), got.data(), &pool, path);
    matmul(x.data(), tokens, reference, bias.data(), want.data(), nullptr, KernelPath::kScalar);
    for (std::size_t t = 0; t < tokens; ++t) {
      for (std::size_t o = 0; o < rows; ++o) {
        double magnitude = std::fabs(bias[o]);
        for (std::size_t k = 0; k < cols; ++k)
          magnitude += std::fabs(x[t * cols + k] * m.dequantized[o * cols + k]);
        ASSERT_NEAR(got[t * rows + o], want[t * rows + o], 2e-5 * magnitude + 1e-6)
            << quant::quant_info(type).name << " tokens=" << tokens << " rows=" << rows
            << " cols=" << cols << " t=" << t << " o=" << o;
      }
    }
  }
}

TEST_P(QuantMatmulTest, FastDequantizeMatchesReference) {
  const auto [type, path] = GetParam();
  if (path == KernelPath::kAvx2 && !avx2_available()) GTEST_SKIP() << "no AVX2/FMA/F16C";
  if (path == KernelPath::kAvx512 && !avx512_available()) GTEST_SKIP() << "no AVX-512F";
  std::mt19937 rng(9);
  for (const std::size_t cols :
       {std::size_t{8}, std::size_t{64}, std::size_t{100}, std::size_t{384}}) {
    const QuantizedMatrix m = make_matrix(type, 3, cols, rng);
    std::vector<float> out(cols);
    for (std::size_t r = 0; r < 3; ++r) {
      weight_row_to_f32(m.w, r, out.data(), path);
      for (std::size_t i = 0; i < cols; ++i) {
        const float want = m.dequantized[r * cols + i];
        ASSERT_NEAR(out[i], want, 1e-6f * (1.0f + std::fabs(want)))
            << quant::quant_info(type).name << " cols=" << cols << " i=" << i;
      }
    }
  }
}

// quant_dot_rows (x prepared once for every row on the AVX-512 path) gives each row's
// quant_dot bit for bit, full blocks and tails.
TEST_P(QuantMatmulTest, RowsAtOnceAreEachRowsDot) {
  const auto [type, path] = GetParam();
  if (path == KernelPath::kAvx2 && !avx2_available()) GTEST_SKIP() << "no AVX2/FMA/F16C";
  if (path == KernelPath::kAvx512 && !avx512_available()) GTEST_SKIP() << "no AVX-512F";
  std::mt19937 rng(13);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const std::size_t cols :
       {std::size_t{7}, std::size_t{64}, std::size_t{200}, std::size_t{256}, std::size_t{4096}}) {
    const std::size_t rows = 9;
    const QuantizedMatrix m = make_matrix(type, rows, cols, rng);
    std::vector<float> x(cols), y(rows);
    for (auto& v : x)
      v = dist(rng);
    const auto* bytes = m.bytes.data();
    const std::size_t stride = quant::row_bytes(type, cols);
    quant_dot_rows(x.data(), type, bytes, stride, rows, cols, y.data(), path);
    for (std::size_t r = 0; r < rows; ++r) {
      const float want = quant_dot(x.data(), type, bytes + r * stride, cols, path);
      ASSERT_EQ(y[r], want) << quant::quant_info(type).name << " cols=" << cols << " r=" << r;
    }
  }
}

std::string name_of(const ::testing::TestParamInfo<std::tuple<QuantType, KernelPath>>& info) {
  const auto [type, path] = info.param;
  return std::string(quant::quant_info(type).name) + "_" + kernel_path_name(path);
}

INSTANTIATE_TEST_SUITE_P(AllFormats, QuantMatmulTest,
                         ::testing::Combine(::testing::ValuesIn(quant::all_quant_types().begin(),
                                                                quant::all_quant_types().end()),
                                            ::testing::Values(KernelPath::kScalar,
                                                              KernelPath::kAvx2,
                                                              KernelPath::kAvx512)),
                         name_of);

}  // namespace
}  // namespace weft::cpu
