#include "runtime/sampling/philox.hpp"

#include <gtest/gtest.h>

#include <set>

namespace weft::sampling {
namespace {

// Random123's published known-answer vectors (tests/kat_vectors) for Philox4x32-10.
TEST(Philox, KnownAnswers) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(
      philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
      (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(
      philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
      (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Philox, UniformIsInUnitIntervalAndDependsOnEveryInput) {
  std::set<double> seen;
  double sum = 0.0;
  for (std::uint64_t step = 0; step < 10000; ++step) {
    const double u = philox_uniform(42, 0, step);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    seen.insert(u);
  }
  EXPECT_EQ(seen.size(), 10000u);
  EXPECT_NEAR(sum / 10000.0, 0.5, 0.01);  // sd of the mean is 0.0029
  EXPECT_NE(philox_uniform(42, 0, 5), philox_uniform(43, 0, 5));
  EXPECT_NE(philox_uniform(42, 0, 5), philox_uniform(42, 1, 5));
  EXPECT_NE(philox_uniform(42, 0, 5), philox_uniform(42, 0, 6));
  EXPECT_NE(philox_uniform(1, 0, 5), philox_uniform(1ull << 32 | 1, 0, 5));  // high seed bits
  EXPECT_EQ(philox_uniform(42, 3, 9), philox_uniform(42, 3, 9));
}

}  // namespace
}  // namespace weft::sampling
