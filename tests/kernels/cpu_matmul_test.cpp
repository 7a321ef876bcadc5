// CPU matmul and the vector loops under it: scalar and AVX2 paths against a double-precision
// reference on awkward sizes, for f32, f16 and bf16 weights.

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.hpp"

namespace weft::cpu {
namespace {

struct Weights {
  DType dtype;
  std::vector<float> f32;
  std::vector<std::uint16_t> half;
  std::vector<float> rounded;  // the values the kernel should see after widening
  const void* data() const {
    return dtype == DType::kF32 ? static_cast<const void*>(f32.data()) : half.data();
  }
};

Weights make_weights(DType dtype, std::size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Weights w{dtype, {}, {}, {}};
  for (std::size_t i = 0; i < n; ++i) {
    const float v = dist(rng);
    if (dtype == DType::kF32) {
      w.f32.push_back(v);
      w.rounded.push_back(v);
    } else {
      const auto bits = dtype == DType::kF16 ? f32_to_f16(v) : f32_to_bf16(v);
      w.half.push_back(bits);
      w.rounded.push_back(dtype == DType::kF16 ? f16_to_f32(bits) : bf16_to_f32(bits));
    }
  }
  return w;
}

class MatmulTest : public ::testing::TestWithParam<std::tuple<DType, KernelPath>> {};

TEST_P(MatmulTest, MatchesDoublePrecisionReferenceOnAwkwardSizes) {
  const auto [dtype, path] = GetParam();
  if (path == KernelPath::kAvx2 && !avx2_available()) GTEST_SKIP() << "no AVX2/FMA/F16C";
  std::mt19937 rng(7);
  ThreadPool pool(3);
  for (auto [tokens, rows, cols] : {std::tuple<std::size_t, std::size_t, std::size_t>{1, 1, 1},
                                    {1, 37, 67},
                                    {3, 65, 129},
                                    {5, 17, 8},
                                    {2, 100, 33}}) {
    const Weights w = make_weights(dtype, rows * cols, rng);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(tokens * cols), bias(rows), y(tokens * rows);
    for (auto& v : x)
      v = dist(rng);
    for (auto& v : bias)
      v = dist(rng);
    matmul(x.data(), tokens, WeightMatrix{dtype, w.data(), rows, cols}, bias.data(), y.data(),
           &pool, path);
    for (std::size_t t = 0; t < tokens; ++t) {
      for (std::size_t o = 0; o < rows; ++o) {
        double want = bias[o];
        for (std::size_t k = 0; k < cols; ++k)
          want += double(x[t * cols + k]) * w.rounded[o * cols + k];
        EXPECT_NEAR(y[t * rows + o], want, 1e-4 * (1.0 + std::sqrt(double(cols))))
            << "tokens " << tokens << " rows " << rows << " cols " << cols << " at " << t << ","
            << o;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllWeightTypes, MatmulTest,
    ::testing::Combine(::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                       ::testing::Values(KernelPath::kScalar, KernelPath::kAvx2)));

// A token's outputs must keep their bits whatever else is in the call: alone (a decode step),
// among 1 to 8 other tokens, at any place among them, with rows split over threads in chunks
// that depend on the number of tokens. Seeded sampling of a batched request depends on it.
TEST_P(MatmulTest, EachTokensOutputsKeepTheirBitsWhateverTheBatch) {
  const auto [dtype, path] = GetParam();
  if (path == KernelPath::kAvx2 && !avx2_available()) GTEST_SKIP() << "no AVX2/FMA/F16C";
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  ThreadPool pool(3);
  // 1,027 columns: blocks of 8 and a tail; 75 rows: neither a multiple of 2 nor of 4, and
  // enough work per token that the pool splits them differently for each batch size.
  const std::size_t rows = 75, cols = 1027, max_tokens = 9;
  const Weights w = make_weights(dtype, rows * cols, rng);
  const WeightMatrix m{dtype, w.data(), rows, cols};
  std::vector<float> bias(rows), x(max_tokens * cols);
  for (auto& v : bias)
    v = dist(rng);
  for (auto& v : x)
    v = dist(rng);
  std::vector<float> alone(max_tokens * rows);
  for (std::size_t t = 0; t < max_tokens; ++t)
    matmul(x.data() + t * cols, 1, m, bias.data(), alone.data() + t * rows, &pool, path);
  for (std::size_t tokens = 2; tokens <= max_tokens; ++tokens) {
    for (std::size_t first = 0; first + tokens <= max_tokens; ++first) {
      std::vector<float> y(tokens * rows);
      matmul(x.data() + first * cols, tokens, m, bias.data(), y.data(), &pool, path);
      for (std::size_t t = 0; t < tokens; ++t) {
        for (std::size_t o = 0; o < rows; ++o) {
          ASSERT_EQ(y[t * rows + o], alone[(first + t) * rows + o])
              << "token " << first + t << " at place " << t << " of " << tokens << ", row " << o;
        }
      }
    }
  }
}

TEST(MatmulGroup, EqualsSeparateProductsAcrossSegmentBoundaries) {
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  ThreadPool pool(3);
  // 6 tokens x 2048 columns is enough work to split the 90 rows into chunks that straddle
  // the segment boundaries at 33 and 40.
  for (auto [tokens, cols] : {std::pair<std::size_t, std::size_t>{1, 40}, {6, 2048}}) {
    const Weights a = make_weights(DType::kBF16, 33 * cols, rng);
    const Weights b = make_weights(DType::kBF16, 7 * cols, rng);
    const Weights c = make_weights(DType::kBF16, 50 * cols, rng);
    const WeightMatrix wa{DType::kBF16, a.data(), 33, cols}, wb{DType::kBF16, b.data(), 7, cols},
        wc{DType::kBF16, c.data(), 50, cols};
    std::vector<float> x(tokens * cols), bias(7);
    for (auto& v : x)
      v = dist(rng);
    for (auto& v : bias)
      v = dist(rng);
    std::vector<float> ya(tokens * 33), yb(tokens * 7), yc(tokens * 50);
    const MatmulOutput outs[] = {
        {&wa, nullptr, ya.data()}, {&wb, bias.data(), yb.data()}, {&wc, nullptr, yc.data()}};
    matmul_group(x.data(), tokens, outs, &pool);
    for (const auto& out : outs) {
      std::vector<float> want(tokens * out.w->rows);
      matmul(x.data(), tokens, *out.w, out.bias, want.data(), nullptr);
      for (std::size_t i = 0; i < want.size(); ++i)
        EXPECT_NEAR(out.y[i], want[i], 1e-4) << i;
    }
  }
}

TEST(HalfConversion, RoundTripsAndRoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between two bf16 values; ties go to the even mantissa (1.0).
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);  // largest finite
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);      // overflows to infinity
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  for (std::uint32_t bits = 0; bits < 0x7c00; bits += 7) {
    const auto h = static_cast<std::uint16_t>(bits);
    EXPECT_EQ(f32_to_f16(f16_to_f32(h)), h) << bits;
  }
}

TEST(VectorMath, Avx2AndScalarAgreeOnTails) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2/FMA/F16C";
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (std::size_t n : {1u, 7u, 8u, 9u, 31u, 33u, 100u}) {
    std::vector<float> a(n), b(n), y1(n), y2(n);
    for (auto& v : a)
      v = dist(rng);
    for (auto& v : b)
      v = dist(rng);
    EXPECT_NEAR(dot(a.data(), DType::kF32, b.data(), n, KernelPath::kScalar),
                dot(a.data(), DType::kF32, b.data(), n, KernelPath::kAvx2), 1e-4)
        << n;
    y1 = b;
    y2 = b;
    axpy(0.5f, a.data(), y1.data(), n, KernelPath::kScalar);
    axpy(0.5f, a.data(), y2.data(), n, KernelPath::kAvx2);
    for (std::size_t i = 0; i < n; ++i)
      EXPECT_FLOAT_EQ(y1[i], y2[i]);
  }
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  ThreadPool pool(4);
  for (std::size_t n : {0u, 1u, 3u, 4u, 5u, 1000u}) {
    std::vector<int> hits(n, 0);
    pool.parallel_for(n, [&](std::size_t b, std::size_t e) {
      for (auto i = b; i < e; ++i)
        ++hits[i];
    });
    for (std::size_t i = 0; i < n; ++i)
      EXPECT_EQ(hits[i], 1) << "n " << n << " i " << i;
  }
}

}  // namespace
}  // namespace weft::cpu
