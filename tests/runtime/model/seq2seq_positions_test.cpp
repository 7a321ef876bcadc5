// T5's relative position buckets and M2M100's sinusoidal table against their formulas written
// out (transformers' T5Attention._relative_position_bucket and
// M2M100SinusoidalPositionalEmbedding.get_embedding), with values worked by hand.

#include "runtime/model/seq2seq_positions.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/runtime/model/seq2seq_reference.hpp"

namespace weft::model {
namespace {

TEST(RelativePositionBucket, HandWorkedValuesBidirectional) {
  // 32 buckets, max distance 128: 16 a side, exact below 8, then 8 + log(n/8)/log(16) * 8.
  EXPECT_EQ(relative_position_bucket(0, true, 32, 128), 0);
  EXPECT_EQ(relative_position_bucket(-1, true, 32, 128), 1);
  EXPECT_EQ(relative_position_bucket(1, true, 32, 128), 17);  // later keys: the upper half
  EXPECT_EQ(relative_position_bucket(-7, true, 32, 128), 7);
  EXPECT_EQ(relative_position_bucket(-8, true, 32, 128), 8);    // log(1) = 0
  EXPECT_EQ(relative_position_bucket(-16, true, 32, 128), 10);  // 8 + 0.25 * 8
  EXPECT_EQ(relative_position_bucket(16, true, 32, 128), 26);
  EXPECT_EQ(relative_position_bucket(-127, true, 32, 128), 15);  // 8 + 7.97
  EXPECT_EQ(relative_position_bucket(-128, true, 32, 128), 15);  // clamped to the last
  EXPECT_EQ(relative_position_bucket(-5000, true, 32, 128), 15);
  EXPECT_EQ(relative_position_bucket(5000, true, 32, 128), 31);
}

TEST(RelativePositionBucket, HandWorkedValuesCausal) {
  // 32 buckets for the past: exact below 16, then 16 + log(n/16)/log(8) * 16.
  EXPECT_EQ(relative_position_bucket(3, false, 32, 128), 0);  // the future counts as 0
  EXPECT_EQ(relative_position_bucket(0, false, 32, 128), 0);
  EXPECT_EQ(relative_position_bucket(-15, false, 32, 128), 15);
  EXPECT_EQ(relative_position_bucket(-16, false, 32, 128), 16);
  EXPECT_EQ(relative_position_bucket(-32, false, 32, 128), 21);  // 16 + 5.33
  EXPECT_EQ(relative_position_bucket(-128, false, 32, 128), 31);
  EXPECT_EQ(relative_position_bucket(-100000, false, 32, 128), 31);
}

TEST(RelativePositionBucket, MatchesTheFormulaAndStaysInRange) {
  for (const auto [buckets, max_distance] : {std::pair{32, 128}, {8, 12}, {16, 20}, {64, 256}}) {
    for (const bool bidirectional : {true, false}) {
      int previous_past = -1;
      for (int rel = -600; rel <= 600; ++rel) {
        const int got = relative_position_bucket(rel, bidirectional, buckets, max_distance);
        SCOPED_TRACE(::testing::Message() << "buckets " << buckets << " max " << max_distance
                                          << " bidirectional " << bidirectional << " rel " << rel);
        EXPECT_EQ(got,
                  testing::seq2seq::reference_bucket(rel, bidirectional, buckets, max_distance));
        EXPECT_GE(got, 0);
        EXPECT_LT(got, buckets);
        if (rel <= 0) {
          // Towards the query (rel rising to 0), a key never gets a larger bucket.
          if (previous_past >= 0) EXPECT_LE(got, previous_past);
          previous_past = got;
        }
      }
    }
  }
}

TEST(SinusoidalPosition, MatchesTheFormula) {
  for (const std::size_t dim : {4u, 16u, 64u, 65u}) {
    std::vector<float> row(dim);
    const std::size_t half = dim / 2;
    for (const int r : {0, 2, 3, 17, 130, 1025}) {
      sinusoidal_position(r, dim, 1, row.data());
      for (std::size_t j = 0; j < half; ++j) {
        const double f = std::exp(-static_cast<double>(j) * std::log(10000.0) / (half - 1.0));
        // fp32 frequencies and angles: |error| grows with the angle (r * f, up to ~1000).
        const double tol = 1e-6 + 2e-7 * r;
        EXPECT_NEAR(row[j], std::sin(r * f), tol) << "dim " << dim << " row " << r << " j " << j;
        EXPECT_NEAR(row[half + j], std::cos(r * f), tol)
            << "dim " << dim << " row " << r << " j " << j;
      }
      if (dim % 2 == 1) EXPECT_EQ(row[dim - 1], 0.0f);
    }
    // Row 2 starts with sin(2) and cos(2) (frequency 1 at j = 0).
    sinusoidal_position(2, dim, 1, row.data());
    EXPECT_NEAR(row[0], std::sin(2.0), 1e-6);
    EXPECT_NEAR(row[half], std::cos(2.0), 1e-6);
  }
}

TEST(SinusoidalPosition, PaddingRowIsZero) {
  std::vector<float> row(16, 7.0f);
  sinusoidal_position(1, 16, 1, row.data());
  for (const float f : row)
    EXPECT_EQ(f, 0.0f);
  sinusoidal_position(0, 16, -1, row.data());  // no padding index: row 0 is sin 0, cos 0
  EXPECT_EQ(row[0], 0.0f);
  EXPECT_EQ(row[8], 1.0f);
}

}  // namespace
}  // namespace weft::model
