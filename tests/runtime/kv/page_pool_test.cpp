// PagePool: exact free counts, all-or-nothing allocation, reference counts, the peak.

#include "runtime/kv/page_pool.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "weft/error.hpp"

namespace weft::kv {
namespace {

void expect_counts(const PagePool& pool, int used) {
  EXPECT_EQ(pool.used_pages(), used);
  EXPECT_EQ(pool.free_pages(), pool.num_pages() - used);
}

TEST(PagePool, AllocatesDistinctPagesAndCountsExactly) {
  PagePool pool(10, 16);
  EXPECT_EQ(pool.num_pages(), 10);
  EXPECT_EQ(pool.page_size(), 16);
  expect_counts(pool, 0);
  std::vector<std::int32_t> a, b;
  ASSERT_TRUE(pool.allocate(3, a));
  ASSERT_TRUE(pool.allocate(7, b));
  expect_counts(pool, 10);
  std::set<std::int32_t> all(a.begin(), a.end());
  all.insert(b.begin(), b.end());
  EXPECT_EQ(all.size(), 10u) << "a page handed out twice";
  EXPECT_EQ(*all.begin(), 0);
  EXPECT_EQ(*all.rbegin(), 9);
  for (std::int32_t p : all)
    EXPECT_EQ(pool.ref_count(p), 1);
  pool.release_all(a);
  expect_counts(pool, 7);
  EXPECT_TRUE(pool.allocate(0, a)) << "nothing asked, nothing to refuse";
  EXPECT_EQ(a.size(), 3u);
}

TEST(PagePool, AllocationIsAllOrNothing) {
  PagePool pool(5, 4);
  std::vector<std::int32_t> held;
  ASSERT_TRUE(pool.allocate(3, held));
  std::vector<std::int32_t> out = {42};  // what was there before stays, and nothing is added
  EXPECT_FALSE(pool.allocate(3, out));
  EXPECT_EQ(out, std::vector<std::int32_t>{42});
  expect_counts(pool, 3);
  EXPECT_FALSE(pool.allocate(-1, out));
  expect_counts(pool, 3);
  EXPECT_TRUE(pool.allocate(2, out)) << "exactly what is free";
  expect_counts(pool, 5);
  EXPECT_FALSE(pool.allocate(1, out));
}

TEST(PagePool, RetainAndReleaseCountReferences) {
  PagePool pool(4, 8);
  std::vector<std::int32_t> pages;
  ASSERT_TRUE(pool.allocate(2, pages));
  const std::int32_t shared = pages[0];
  pool.retain(shared);
  pool.retain(shared);
  EXPECT_EQ(pool.ref_count(shared), 3);
  pool.release(shared);
  pool.release(shared);
  EXPECT_EQ(pool.ref_count(shared), 1);
  expect_counts(pool, 2);  // a shared page is one page
  pool.release(shared);
  EXPECT_EQ(pool.ref_count(shared), 0);
  expect_counts(pool, 1);
  // The freed page is handed out next (a stack: the cache-warm page first).
  std::vector<std::int32_t> again;
  ASSERT_TRUE(pool.allocate(1, again));
  EXPECT_EQ(again[0], shared);
  EXPECT_EQ(pool.ref_count(shared), 1);
}

TEST(PagePool, DoubleReleaseAndRetainOfAFreePageThrow) {
  PagePool pool(3, 16);
  std::vector<std::int32_t> pages;
  ASSERT_TRUE(pool.allocate(1, pages));
  pool.release(pages[0]);
  try {
    pool.release(pages[0]);
    FAIL() << "a double release";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
  }
  expect_counts(pool, 0);  // the bad release changed nothing
  EXPECT_THROW(pool.retain(pages[0]), Error);
  EXPECT_THROW(pool.release(2), Error) << "never allocated";
  EXPECT_THROW(pool.release(3), std::out_of_range) << "not a page of this pool";
  EXPECT_EQ(pool.free_pages(), 3);
}

TEST(PagePool, PeakIsTheHighWaterMark) {
  PagePool pool(8, 2);
  std::vector<std::int32_t> a, b;
  EXPECT_EQ(pool.peak_used_pages(), 0);
  ASSERT_TRUE(pool.allocate(5, a));
  pool.release_all(a);
  EXPECT_EQ(pool.peak_used_pages(), 5);
  ASSERT_TRUE(pool.allocate(2, b));
  EXPECT_EQ(pool.peak_used_pages(), 5) << "the peak never goes down by itself";
  EXPECT_FALSE(pool.allocate(7, a)) << "a refused allocation is not a peak";
  EXPECT_EQ(pool.peak_used_pages(), 5);
  pool.reset_peak();
  EXPECT_EQ(pool.peak_used_pages(), 2);
  ASSERT_TRUE(pool.allocate(6, a));
  EXPECT_EQ(pool.peak_used_pages(), 8);
}

// The prefix cache's reference: a cached page only the cache holds is evictable, counts as
// available, and is not in the held peak.
TEST(PagePool, CachedPagesWithOneReferenceAreEvictable) {
  PagePool pool(6, 4);
  std::vector<std::int32_t> a;
  ASSERT_TRUE(pool.allocate(3, a));
  EXPECT_EQ(pool.peak_used_pages(), 3);
  pool.retain(a[0]);  // a second holder of page a[0]
  pool.set_cached(a[0], true);
  pool.set_cached(a[1], true);
  EXPECT_TRUE(pool.cached(a[0]));
  EXPECT_EQ(pool.evictable_pages(), 1) << "a[1]: only the cache's reference is left";
  EXPECT_EQ(pool.available_pages(), 4);
  EXPECT_EQ(pool.held_pages(), 2);
  pool.release(a[0]);
  EXPECT_EQ(pool.evictable_pages(), 2);
  pool.reset_peak();
  EXPECT_EQ(pool.peak_used_pages(), 1);
  pool.retain(a[1]);  // a match takes it back into use
  EXPECT_EQ(pool.evictable_pages(), 1);
  EXPECT_EQ(pool.peak_used_pages(), 2);
  EXPECT_THROW(pool.release(a[0]), Error) << "the cache's own reference goes only unmarked";
  pool.set_cached(a[0], false);
  EXPECT_EQ(pool.evictable_pages(), 0);
  pool.release(a[0]);
  EXPECT_EQ(pool.free_pages(), 4);
  std::vector<std::int32_t> fresh;
  ASSERT_TRUE(pool.allocate(1, fresh));
  EXPECT_FALSE(pool.cached(fresh[0])) << "a reused page starts uncached";
  EXPECT_THROW(pool.set_cached(5, true), Error) << "a free page";
}

// page_size 1 is LightLLM's token-level cache: one page per token, nothing rounded.
TEST(PagePool, PageSizeOneIsOnePagePerToken) {
  PagePool pool(100, 1);
  EXPECT_EQ(pool.pages_for(0), 0);
  EXPECT_EQ(pool.pages_for(1), 1);
  EXPECT_EQ(pool.pages_for(37), 37);
  std::vector<std::int32_t> seq;
  for (int token = 0; token < 100; ++token) {
    ASSERT_TRUE(pool.allocate(pool.pages_for(token + 1) - static_cast<int>(seq.size()), seq));
    EXPECT_EQ(pool.used_pages(), token + 1);
  }
  EXPECT_EQ(pool.free_pages(), 0);
  std::vector<std::int32_t> none;
  EXPECT_FALSE(pool.allocate(1, none));
  pool.release_all(seq);
  EXPECT_EQ(pool.free_pages(), 100);

  PagePool paged(10, 16);
  EXPECT_EQ(paged.pages_for(16), 1);
  EXPECT_EQ(paged.pages_for(17), 2);
}

TEST(PagePool, RefusesBadShapes) {
  EXPECT_THROW(PagePool(-1, 16), Error);
  EXPECT_THROW(PagePool(4, 0), Error);
  PagePool empty(0, 16);
  std::vector<std::int32_t> out;
  EXPECT_FALSE(empty.allocate(1, out));
  EXPECT_TRUE(empty.allocate(0, out));
}

}  // namespace
}  // namespace weft::kv
