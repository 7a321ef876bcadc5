// KV-Compress's policy (runtime/kv/kv_compress.hpp): how many slots a head evicts (whole
// pages, never into the window) and which it keeps, against written-out answers.

#include "runtime/kv/kv_compress.hpp"

#include <gtest/gtest.h>

namespace weft::kv {
namespace {

TEST(KvCompressPolicy, EvictsRateTimesSlotsInWholePagesAndNeverTheWindow) {
  struct Case {
    int slots;
    double rate;
    int window, page_size, want;
  };
  const Case cases[] = {
      {100, 0.5, 16, 16, 48},   // 50 wanted, rounded down to 3 pages
      {100, 0.25, 16, 16, 16},  // 25 -> 1 page
      {100, 0.75, 16, 16, 64},  // 75 -> 4 pages
      {100, 0.9, 16, 16, 80},   // 90 wanted but only 84 evictable -> 5 pages would cut the window
      {40, 0.75, 16, 8, 24},    // 30 wanted, 24 evictable: 3 pages
      {10, 0.25, 2, 1, 2},      // token-level pages: floor(2.5)
      {31, 0.5, 16, 16, 0},     // 15 wanted: less than a page
      {16, 0.5, 16, 4, 0},      // all window
      {12, 0.5, 16, 4, 0},      // shorter than the window
      {100, 0.0, 16, 16, 0},    // off
  };
  for (const Case& c : cases) {
    EXPECT_EQ(evicted_slots(c.slots, KvCompressConfig{c.rate, c.window}, c.page_size), c.want)
        << c.slots << " slots, rate " << c.rate << ", window " << c.window << ", page "
        << c.page_size;
  }
}

TEST(KvCompressPolicy, KeepsTheWindowAndTheHighestScores) {
  //                              0    1    2    3    4     5    6    7    8    9
  const std::vector<float> scores{0.9, 0.1, 0.5, 0.5, 0.05, 0.7, 0.2, 0.3, 0.0, 0.0};
  std::vector<int> kept;
  select_kept_slots(scores, 4, 2, kept);  // window: slots 8, 9 (scores 0, still kept)
  EXPECT_EQ(kept, (std::vector<int>{0, 2, 3, 5, 8, 9}));
  select_kept_slots(scores, 5, 2, kept);  // a tie between 2 and 3: the earlier stays
  EXPECT_EQ(kept, (std::vector<int>{0, 2, 5, 8, 9}));
  select_kept_slots(scores, 0, 2, kept);
  EXPECT_EQ(kept, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  select_kept_slots(scores, 8, 2, kept);
  EXPECT_EQ(kept, (std::vector<int>{8, 9}));
  select_kept_slots(scores, 20, 4, kept);  // never into the window, whatever is asked
  EXPECT_EQ(kept, (std::vector<int>{6, 7, 8, 9}));
}

TEST(KvCompressPolicy, BadRatesAndWindowsNameTheirValue) {
  EXPECT_TRUE(check(KvCompressConfig{0.0, 16}).ok());
  EXPECT_TRUE(check(KvCompressConfig{0.75, 1}).ok());
  auto rate = check(KvCompressConfig{1.5, 16});
  ASSERT_FALSE(rate.ok());
  EXPECT_STREQ(rate.error().what(), "kv_compress_rate: 1.5 is outside [0, 1) (0 turns it off)");
  EXPECT_FALSE(check(KvCompressConfig{-0.1, 16}).ok());
  auto window = check(KvCompressConfig{0.5, 0});
  ASSERT_FALSE(window.ok());
  EXPECT_STREQ(window.error().what(), "kv_compress_window: 0 is outside [1, 4096]");
}

}  // namespace
}  // namespace weft::kv
