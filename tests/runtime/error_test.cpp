#include "weft/error.hpp"

#include <gtest/gtest.h>

#include <string>

namespace weft {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0)
    return Error(ErrorCode::kInvalidArgument, "value: expected > 0, got " + std::to_string(v));
  return v;
}

TEST(Result, HoldsAValue) {
  auto r = parse_positive(3);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 3);
  EXPECT_EQ(r.value(), 3);
}

TEST(Result, HoldsAnErrorAndValueThrowsIt) {
  auto r = parse_positive(-1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_STREQ(r.error().what(), "value: expected > 0, got -1");
  EXPECT_THROW(r.value(), Error);
}

TEST(Result, VoidResult) {
  Result<void> fine;
  EXPECT_TRUE(fine.ok());
  EXPECT_NO_THROW(fine.value());
  Result<void> bad = Error(ErrorCode::kNotFound, "missing");
  EXPECT_FALSE(bad.ok());
  EXPECT_THROW(bad.value(), Error);
}

TEST(ErrorCode, HasStableNames) {
  EXPECT_EQ(to_string(ErrorCode::kParse), "parse_error");
  EXPECT_EQ(to_string(ErrorCode::kShutdown), "shutdown");
}

}  // namespace
}  // namespace weft
