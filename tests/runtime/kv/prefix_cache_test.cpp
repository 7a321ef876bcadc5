// PrefixCache: the radix tree over KV pages: matches, insertion, reference counts, LRU
// eviction of unreferenced leaves, and the pool's evictable count.

#include "runtime/kv/prefix_cache.hpp"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

namespace weft::kv {
namespace {

std::vector<std::int32_t> iota_tokens(int n, int start = 0) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

// A sequence that computed `tokens` in fresh pages and ends: its pages go to the cache.
std::vector<std::int32_t> finish_fresh(PagePool& pool, PrefixCache& cache,
                                       const std::vector<std::int32_t>& tokens) {
  std::vector<std::int32_t> pages;
  EXPECT_TRUE(pool.allocate(pool.pages_for(static_cast<int>(tokens.size())), pages));
  const std::vector<std::int32_t> copy = pages;
  cache.release(tokens, static_cast<int>(tokens.size()), pages);
  EXPECT_TRUE(pages.empty());
  return copy;
}

TEST(PrefixCache, MatchesFullPagesOfTheLongestCachedPrefix) {
  PagePool pool(16, 4);
  PrefixCache cache(pool);
  const auto tokens = iota_tokens(10);  // two full pages and a partial one
  const auto pages = finish_fresh(pool, cache, tokens);
  EXPECT_EQ(cache.cached_pages(), 2);
  EXPECT_EQ(pool.used_pages(), 2) << "the partial page goes back to the pool";
  EXPECT_EQ(pool.evictable_pages(), 2);
  EXPECT_EQ(pool.available_pages(), 16);

  std::vector<std::int32_t> got;
  auto query = iota_tokens(12);
  EXPECT_EQ(cache.match(query, 11, got), 8);
  EXPECT_EQ(got, std::vector<std::int32_t>(pages.begin(), pages.begin() + 2));
  EXPECT_EQ(pool.ref_count(got[0]), 2);
  EXPECT_EQ(pool.evictable_pages(), 0) << "a held page cannot be evicted";

  // The match stops at max_tokens and at the first differing chunk.
  std::vector<std::int32_t> short_match;
  EXPECT_EQ(cache.match(query, 7, short_match), 4);
  query[5] = 99;
  std::vector<std::int32_t> diverged;
  EXPECT_EQ(cache.match(query, 12, diverged), 4);
  std::vector<std::int32_t> none;
  EXPECT_EQ(cache.match(iota_tokens(8, 1), 8, none), 0);
  EXPECT_TRUE(none.empty());

  pool.release_all(got);
  pool.release_all(short_match);
  pool.release_all(diverged);
  EXPECT_EQ(pool.evictable_pages(), 2);
}

TEST(PrefixCache, ReleaseOfAMatchedSequenceExtendsThePath) {
  PagePool pool(16, 4);
  PrefixCache cache(pool);
  finish_fresh(pool, cache, iota_tokens(8));
  // A second turn: matches 8, computes 6 more tokens in pages of its own.
  auto turn2 = iota_tokens(14);
  std::vector<std::int32_t> pages;
  ASSERT_EQ(cache.match(turn2, 13, pages), 8);
  ASSERT_TRUE(pool.allocate(2, pages));
  cache.release(turn2, 14, pages);
  EXPECT_EQ(cache.cached_pages(), 3);
  EXPECT_EQ(pool.used_pages(), 3);
  for (int p = 0; p < pool.num_pages(); ++p) {
    if (pool.ref_count(p) > 0) {
      EXPECT_EQ(pool.ref_count(p), 1) << "page " << p;
    }
  }
  std::vector<std::int32_t> got;
  EXPECT_EQ(cache.match(iota_tokens(20), 20, got), 12);
  pool.release_all(got);
}

TEST(PrefixCache, ATwinChunkKeepsTheCachedPageAndFreesTheOther) {
  PagePool pool(16, 4);
  PrefixCache cache(pool);
  const auto first = finish_fresh(pool, cache, iota_tokens(8));
  // Computed concurrently with the first, in pages of its own, and longer.
  const auto second = finish_fresh(pool, cache, iota_tokens(12));
  EXPECT_EQ(cache.cached_pages(), 3) << "the twin pages are dropped, the new one grafted";
  EXPECT_EQ(pool.used_pages(), 3);
  EXPECT_EQ(pool.ref_count(second[0]), 0);
  EXPECT_EQ(pool.ref_count(second[2]), 1);
  std::vector<std::int32_t> got;
  EXPECT_EQ(cache.match(iota_tokens(13), 13, got), 12);
  EXPECT_EQ(got, (std::vector<std::int32_t>{first[0], first[1], second[2]}));
  pool.release_all(got);
}

TEST(PrefixCache, EvictsLeastRecentlyUsedLeavesFirst) {
  PagePool pool(8, 2);
  PrefixCache cache(pool);
  // Two branches under a shared first page: [0 1][2 3] and [0 1][7 7].
  finish_fresh(pool, cache, {0, 1, 2, 3});
  finish_fresh(pool, cache, {0, 1, 7, 7});
  EXPECT_EQ(cache.cached_pages(), 3);
  // Touch the first branch: the second is now the least recently used.
  std::vector<std::int32_t> held;
  ASSERT_EQ(cache.match(std::vector<std::int32_t>{0, 1, 2, 3, 9}, 5, held), 4);
  pool.release_all(held);
  held.clear();

  EXPECT_EQ(cache.evict(1), 1);
  EXPECT_EQ(cache.evictions(), 1u);
  std::vector<std::int32_t> got;
  EXPECT_EQ(cache.match(std::vector<std::int32_t>{0, 1, 7, 7, 9}, 5, got), 2)
      << "the least recently used leaf went";
  pool.release_all(got);
  got.clear();
  EXPECT_EQ(cache.match(std::vector<std::int32_t>{0, 1, 2, 3, 9}, 5, got), 4);

  // Held pages are never evicted; asking for more frees only what is free to go.
  EXPECT_EQ(cache.evict(10), 0);
  EXPECT_EQ(cache.cached_pages(), 2);
  pool.release_all(got);
  EXPECT_EQ(cache.evict(10), 2) << "leaf, then its parent";
  EXPECT_EQ(cache.cached_pages(), 0);
  EXPECT_EQ(pool.used_pages(), 0);
  EXPECT_EQ(pool.evictable_pages(), 0);
}

TEST(PrefixCache, MakeFreeEvictsOnlyWhatIsMissing) {
  PagePool pool(4, 2);
  PrefixCache cache(pool);
  finish_fresh(pool, cache, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(pool.free_pages(), 1);
  EXPECT_TRUE(cache.make_free(1));
  EXPECT_EQ(cache.cached_pages(), 3);
  EXPECT_TRUE(cache.make_free(3));
  EXPECT_EQ(cache.cached_pages(), 1);
  EXPECT_FALSE(cache.make_free(5));
}

// evict(n) frees the same pages, in the same order, as n calls of evict(1) (the scheduler evicts
// what a step's decodes need in one call): two caches fed the same traffic agree afterwards.
TEST(PrefixCache, OneEvictionOfManyFreesWhatManyEvictionsOfOneFree) {
  PagePool pool_a(200, 2), pool_b(200, 2);
  PrefixCache a(pool_a), b(pool_b);
  std::mt19937 rng(11);
  std::vector<std::vector<std::int32_t>> seqs;
  for (int i = 0; i < 40; ++i) {
    std::vector<std::int32_t> t;
    for (int j = 0; j < 8; ++j)
      t.push_back(static_cast<std::int32_t>(rng() % 3));
    seqs.push_back(t);
  }
  auto feed = [&](PagePool& pool, PrefixCache& cache) {
    for (const auto& t : seqs) {
      std::vector<std::int32_t> pages;
      const int matched = cache.match(t, static_cast<int>(t.size()), pages);
      ASSERT_TRUE(pool.allocate(pool.pages_for(static_cast<int>(t.size())) - matched / 2, pages));
      cache.release(t, static_cast<int>(t.size()), pages);
    }
  };
  feed(pool_a, a);
  feed(pool_b, b);
  ASSERT_EQ(a.cached_pages(), b.cached_pages());
  const int n = a.cached_pages() / 2;
  ASSERT_GT(n, 5);
  EXPECT_EQ(a.evict(n), n);
  for (int i = 0; i < n; ++i)
    ASSERT_EQ(b.evict(1), 1);
  EXPECT_EQ(a.cached_pages(), b.cached_pages());
  for (const auto& t : seqs) {
    std::vector<std::int32_t> pa, pb;
    EXPECT_EQ(a.match(t, static_cast<int>(t.size()), pa),
              b.match(t, static_cast<int>(t.size()), pb));
    EXPECT_EQ(pa, pb);
    pool_a.release_all(pa);
    pool_b.release_all(pb);
  }
}

TEST(PrefixCache, APageASiblingHoldsIsGraftedOnlyUnderItsOwnPath) {
  PagePool pool(16, 2);
  PrefixCache cache(pool);
  const auto twin = finish_fresh(pool, cache, {1, 2});  // the tree has chunk [1 2] already
  // A parent and a sibling sharing its pages [1 2][3 4]; the parent ends first.
  std::vector<std::int32_t> parent;
  ASSERT_TRUE(pool.allocate(2, parent));
  std::vector<std::int32_t> sibling = parent;
  for (auto p : sibling)
    pool.retain(p);
  const std::vector<std::int32_t> tokens{1, 2, 3, 4};
  cache.release(tokens, 4, parent);
  // Grafting [3 4] under the twin would leave the sibling holding a page whose parent it
  // does not hold (so the parent would count as evictable but could not go).
  EXPECT_EQ(cache.cached_pages(), 1);
  EXPECT_EQ(pool.evictable_pages(), 1);
  cache.release(tokens, 4, sibling);  // now nobody else holds it: grafted
  EXPECT_EQ(cache.cached_pages(), 2);
  EXPECT_EQ(pool.evictable_pages(), 2);
  EXPECT_EQ(pool.used_pages(), 2);
  EXPECT_EQ(cache.evict(2), 2);
  EXPECT_EQ(pool.used_pages(), 0);
  (void)twin;
}

// Random traffic: sequences match, grow, end; evictions under pressure. Every evictable page
// can really be evicted, and at the end every page returns.
TEST(PrefixCache, RandomTrafficReturnsEveryPage) {
  constexpr int kPageSize = 3;
  PagePool pool(40, kPageSize);
  std::mt19937 rng(7);
  {
    PrefixCache cache(pool);
    struct Live {
      std::vector<std::int32_t> tokens;
      std::vector<std::int32_t> pages;
      int computed = 0;
    };
    std::vector<Live> live;
    for (int step = 0; step < 3000; ++step) {
      const int action = static_cast<int>(rng() % 3);
      if (action == 0 || live.empty()) {
        Live s;
        const int len = 1 + static_cast<int>(rng() % 14);
        for (int i = 0; i < len; ++i)
          s.tokens.push_back(static_cast<std::int32_t>(i < 6 ? rng() % 2 : rng() % 4));
        const int matched = cache.match(s.tokens, len - 1, s.pages);
        const int need = pool.pages_for(len) - static_cast<int>(s.pages.size());
        if (!cache.make_free(need) || !pool.allocate(need, s.pages)) {
          pool.release_all(s.pages);
          continue;
        }
        // The matched pages are computed; of the rest, any part may be.
        s.computed = matched + static_cast<int>(rng() % static_cast<unsigned>(len - matched + 1));
        live.push_back(std::move(s));
      } else if (action == 1) {
        const std::size_t k = rng() % live.size();
        cache.release(live[k].tokens, live[k].computed, live[k].pages);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      } else {
        // Everything evictable can go.
        const int evictable = pool.evictable_pages();
        const int free = pool.free_pages();
        EXPECT_EQ(cache.evict(evictable), evictable);
        EXPECT_EQ(pool.free_pages(), free + evictable);
        EXPECT_EQ(pool.evictable_pages(), 0);
      }
      ASSERT_LE(pool.evictable_pages(), cache.cached_pages());
    }
    for (auto& s : live)
      cache.release(s.tokens, s.computed, s.pages);
    EXPECT_EQ(pool.evictable_pages(), cache.cached_pages());
    EXPECT_EQ(pool.used_pages(), cache.cached_pages());
  }
  EXPECT_EQ(pool.used_pages(), 0) << "the cache gives its pages back when destroyed";
}

}  // namespace
}  // namespace weft::kv
