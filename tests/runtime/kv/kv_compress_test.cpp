// KV-Compress's policy (runtime/kv/kv_compress.hpp): how many slots a head evicts (whole
// pages, never into the window) and which it keeps, against written-out answers.

#include "runtime/kv/kv_compress.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

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

// Variable per-head evictions: three units of 8 slots, window 2, pages of 2. Unit 0's slots
// are all but ignored, unit 2's all matter: of the 3 units x 2 slots to evict, unit 0 gives
// its lowest pages first.
TEST(KvCompressPolicy, VariableEvictionsTakeTheLeastAttendedPagesFirstWherever) {
  const std::vector<float> scores{
      0.0f, 0.1f, 0.0f, 0.2f, 0.1f, 0.0f, 5.0f, 5.0f,  // unit 0: pages' worth cost 0, 0.1, 0.3
      1.0f, 1.0f, 1.0f, 0.1f, 0.1f, 1.0f, 5.0f, 5.0f,  // unit 1: cheapest page 0.2, then 2, 2
      9.0f, 8.0f, 7.0f, 6.0f, 5.0f, 4.0f, 5.0f, 5.0f,  // unit 2: 9 (5+4), 13, 17
  };
  // Pages' worth by cost: unit 0 (0.0), unit 0 (0.1), unit 1 (0.2): 6 slots in all.
  EXPECT_EQ(head_evictions(scores, 3, 2, 2, 2), (std::vector<int>{4, 2, 0}));
  // Twice that: unit 0's third page (0.3), then unit 1's next two (2.0 each; unit 0 has no
  // page's worth left outside its window, unit 2's cheapest is 9).
  EXPECT_EQ(head_evictions(scores, 3, 4, 2, 2), (std::vector<int>{6, 6, 0}));
  // Equal scores everywhere: ties go to the lower unit, a page at a time, until it is out of
  // pages' worth outside the window.
  const std::vector<float> flat(24, 1.0f);
  EXPECT_EQ(head_evictions(flat, 3, 2, 2, 2), (std::vector<int>{6, 0, 0}));
  EXPECT_EQ(head_evictions(scores, 3, 0, 2, 2), (std::vector<int>{0, 0, 0}));
}

// Against every whole-page split, on random scores: the chosen split evicts the least total
// score (the lowest-scored slots of each unit), adds up to the uniform total and never takes
// a unit's window.
TEST(KvCompressPolicy, VariableEvictionsAreTheCheapestWholePageSplit) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(0.0f, 1.0f);
  const int units = 3, slots = 11, window = 3, page = 2,
            evict = 4;  // 4 pages of 2 per unit at most
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> scores(static_cast<std::size_t>(units * slots));
    for (auto& x : scores)
      x = dist(rng) * dist(rng);
    auto cost = [&](const std::vector<int>& counts) {
      double total = 0;
      for (int u = 0; u < units; ++u) {
        std::vector<float> row(scores.begin() + u * slots,
                               scores.begin() + u * slots + slots - window);
        std::sort(row.begin(), row.end());
        for (int i = 0; i < counts[static_cast<std::size_t>(u)]; ++i)
          total += row[static_cast<std::size_t>(i)];
      }
      return total;
    };
    const auto got = head_evictions(scores, units, evict, window, page);
    int sum = 0;
    for (int c : got) {
      EXPECT_EQ(c % page, 0);
      EXPECT_LE(c, (slots - window) / page * page);
      sum += c;
    }
    EXPECT_EQ(sum, units * evict);
    double best = 1e30;
    for (int a = 0; a <= 4; ++a)
      for (int b = 0; b <= 4; ++b) {
        const int c = units * evict / page - a - b;
        if (c >= 0 && c <= 4) best = std::min(best, cost({a * page, b * page, c * page}));
      }
    EXPECT_NEAR(cost(got), best, 1e-6) << "trial " << trial;
  }
}

// Three units, pages of 2, 8 slots at compression, evicting {0, 4, 2} (mean 2): the sequence
// keeps 3 pages; unit 0 needs 4 cells, unit 1 two, unit 2 three. Unit 0 borrows unit 1's cell
// of page 2; past that every unit grows into its own cell of each new page.
TEST(KvCompressPolicy, HeadCellsPackTheUnitsIntoTheUniformPages) {
  const HeadCells cells({0, 4, 2}, 8, 2);
  EXPECT_EQ(cells.units(), 3);
  EXPECT_EQ(cells.mean_evicted(), 2);
  EXPECT_EQ(cells.pages(), 3);
  using Cell = HeadCells::Cell;
  auto eq = [](Cell a, Cell b) { return a.page == b.page && a.unit == b.unit; };
  EXPECT_TRUE(eq(cells.cell(0, 0), {0, 0}));
  EXPECT_TRUE(eq(cells.cell(0, 2), {2, 0}));
  EXPECT_TRUE(eq(cells.cell(0, 3), {2, 1}));  // borrowed
  EXPECT_TRUE(eq(cells.cell(0, 4), {3, 0}));  // grown
  EXPECT_TRUE(eq(cells.cell(1, 1), {1, 1}));
  EXPECT_TRUE(eq(cells.cell(1, 2), {3, 1}));
  EXPECT_TRUE(eq(cells.cell(2, 2), {2, 2}));
  EXPECT_TRUE(eq(cells.cell(2, 3), {3, 2}));
  EXPECT_TRUE(eq(cells.cell(2, 4), {4, 2}));
}

// On random splits: the units' kept cells fill the kept pages exactly once each, and each
// page added later gives every unit exactly its own cell, at the same token.
TEST(KvCompressPolicy, HeadCellsUseEveryCellOnceAsTheSequenceGrows) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const int units = 1 + static_cast<int>(rng() % 6), page = 1 + static_cast<int>(rng() % 4);
    const int slots = page * (3 + static_cast<int>(rng() % 8)) - static_cast<int>(rng() % page);
    const int max_pages = (slots - 1) / page;
    const int mean_pages = static_cast<int>(rng() % (max_pages + 1));
    // Random counts with the mean's total, each within [0, max_pages] pages.
    std::vector<int> pages_of(static_cast<std::size_t>(units), 0);
    for (int left = units * mean_pages; left > 0;) {
      auto& p = pages_of[rng() % static_cast<std::size_t>(units)];
      if (p < max_pages) {
        ++p;
        --left;
      }
    }
    std::vector<int> evicted;
    for (int p : pages_of)
      evicted.push_back(p * page);
    const HeadCells cells(evicted, slots, page);
    ASSERT_EQ(cells.mean_evicted(), mean_pages * page);
    const int kept_pages = (slots - mean_pages * page + page - 1) / page;
    ASSERT_EQ(cells.pages(), kept_pages);
    for (int grown = 0; grown <= 3 * page; ++grown) {  // tokens decoded since the compression
      std::vector<int> used(static_cast<std::size_t>((kept_pages + 4) * units), 0);
      int pages_now = 0;
      for (int u = 0; u < units; ++u) {
        const int kept = slots - evicted[static_cast<std::size_t>(u)];
        const int kept_cells = (kept + page - 1) / page;
        for (int j = 0; j * page < kept + grown; ++j) {
          const auto c = cells.cell(u, j);
          ASSERT_GE(c.page, 0);
          ASSERT_LT(c.page, kept_pages + 4);
          ++used[static_cast<std::size_t>(c.page * units + c.unit)];
          pages_now = std::max(pages_now, c.page + 1);
          if (j < kept_cells) {
            EXPECT_LT(c.page, kept_pages) << "a kept cell lies in the kept pages";
          } else {
            EXPECT_EQ(c.unit, u) << "a grown cell is the unit's own";
          }
        }
      }
      // The pages the uniform rule holds for this many tokens, each cell of the kept pages
      // used once and no cell twice.
      EXPECT_EQ(pages_now, (slots - mean_pages * page + grown + page - 1) / page)
          << "trial " << trial << " grown " << grown;
      for (int i = 0; i < pages_now * units; ++i) {
        EXPECT_LE(used[static_cast<std::size_t>(i)], 1) << "trial " << trial << " cell " << i;
        if (i < kept_pages * units) EXPECT_EQ(used[static_cast<std::size_t>(i)], 1);
      }
    }
  }
}

}  // namespace
}  // namespace weft::kv
