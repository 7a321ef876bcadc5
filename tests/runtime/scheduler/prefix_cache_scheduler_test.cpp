// The scheduler with the prefix cache, against a simulated KV store: each position's "KV" is a
// hash of the tokens up to it, the "model" reads every earlier position of the page table
// before writing its own and predicts the next token from that hash. So a page shared wrongly,
// written while shared, or freed while in use shows up as a wrong KV value or a wrong token;
// and the output of every request must equal what a cacheless run computes.

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "runtime/scheduler/scheduler.hpp"

namespace weft::sched {
namespace {

std::uint64_t prefix_hash(const std::vector<std::int32_t>& tokens, int last) {
  std::uint64_t h = 1469598103934665603ull;
  for (int i = 0; i <= last; ++i)
    h = (h ^ static_cast<std::uint64_t>(tokens[static_cast<std::size_t>(i)] + 1)) *
        1099511628211ull;
  return h;
}

std::int32_t next_token(std::uint64_t hash) {
  return static_cast<std::int32_t>(hash % 50);
}

// What a request's output must be, whatever was cached.
std::vector<std::int32_t> reference_output(std::vector<std::int32_t> tokens, int max_new) {
  const std::size_t prompt = tokens.size();
  for (int i = 0; i < max_new; ++i)
    tokens.push_back(next_token(prefix_hash(tokens, static_cast<int>(tokens.size()) - 1)));
  return {tokens.begin() + static_cast<std::ptrdiff_t>(prompt), tokens.end()};
}

class FakeModel {
 public:
  explicit FakeModel(const Scheduler& scheduler)
      : scheduler_(scheduler),
        page_size_(scheduler.pool().page_size()),
        kv_(static_cast<std::size_t>(scheduler.pool().num_pages() * page_size_), 0) {}

  // Runs a plan's forward pass; returns the sampled tokens.
  std::vector<std::int32_t> run(const StepPlan& plan) {
    const kv::PagePool& pool = scheduler_.pool();
    std::vector<std::int32_t> sampled;
    for (const ScheduledSlice& slice : plan.slices) {
      const Sequence* seq = scheduler_.find(slice.id);
      EXPECT_NE(seq, nullptr);
      if (seq == nullptr) continue;
      // Attention reads every earlier position: they must hold this sequence's prefix.
      for (int q = 0; q < slice.first_position; ++q) {
        EXPECT_EQ(at(slice.page_table, q), prefix_hash(seq->tokens, q))
            << "sequence " << slice.id << " position " << q << " of " << slice.first_position;
      }
      for (int i = 0; i < slice.token_count; ++i) {
        const int p = slice.first_position + i;
        const std::int32_t page = slice.page_table[static_cast<std::size_t>(p / page_size_)];
        EXPECT_FALSE(pool.cached(page)) << "a cached page is written";
        EXPECT_EQ(pool.ref_count(page), 1) << "a shared page is written";
        EXPECT_EQ(plan.tokens[static_cast<std::size_t>(slice.token_begin + i)],
                  seq->tokens[static_cast<std::size_t>(p)]);
        at(slice.page_table, p) = prefix_hash(seq->tokens, p);
      }
      if (slice.samples) {
        const int last = slice.first_position + slice.token_count - 1;
        sampled.push_back(next_token(at(slice.page_table, last)));
      }
    }
    return sampled;
  }

 private:
  std::uint64_t& at(const std::vector<std::int32_t>& table, int position) {
    const auto page =
        static_cast<std::size_t>(table[static_cast<std::size_t>(position / page_size_)]);
    return kv_[page * static_cast<std::size_t>(page_size_) +
               static_cast<std::size_t>(position % page_size_)];
  }

  const Scheduler& scheduler_;
  int page_size_;
  std::vector<std::uint64_t> kv_;
};

SchedulerConfig cache_config(int page_size, int num_pages, AdmissionPolicy admission) {
  SchedulerConfig c;
  c.page_size = page_size;
  c.num_pages = num_pages;
  c.max_tokens_per_step = 64;
  c.max_running = 16;
  c.admission = admission;
  c.prefix_cache = true;
  return c;
}

// Runs one request alone to the end; returns its output.
std::vector<std::int32_t> run_alone(Scheduler& scheduler, FakeModel& model, std::uint64_t id,
                                    std::vector<std::int32_t> prompt, int max_new,
                                    int* first_position = nullptr) {
  EXPECT_TRUE(scheduler.add(id, std::move(prompt), max_new).ok());
  bool first = true;
  std::vector<std::int32_t> out;
  for (int steps = 0; steps < 1000; ++steps) {
    StepPlan plan = scheduler.plan_step();
    if (first && first_position != nullptr && !plan.slices.empty()) {
      *first_position = plan.slices[0].first_position;
    }
    first = false;
    scheduler.complete_step(plan, model.run(plan));
    const Sequence* s = scheduler.find(id);
    if (s->generated() >= max_new) {
      out.assign(s->tokens.begin() + s->prompt_len, s->tokens.end());
      scheduler.remove(id);
      return out;
    }
  }
  ADD_FAILURE() << "no progress";
  return out;
}

TEST(SchedulerPrefixCache, ASecondTurnStartsAfterTheCachedPages) {
  Scheduler scheduler(cache_config(4, 32, AdmissionPolicy::kReserve));
  FakeModel model(scheduler);
  std::vector<std::int32_t> turn1{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const auto out1 = run_alone(scheduler, model, 1, turn1, 5);
  EXPECT_EQ(out1, reference_output(turn1, 5));
  // 10 prompt tokens + 4 fed outputs are computed: three full pages are cached.
  EXPECT_EQ(scheduler.prefix_cache_stats().cached_pages, 3);
  EXPECT_EQ(scheduler.pool().used_pages(), 3);

  // Turn 2 = turn 1 + its output + new tokens.
  std::vector<std::int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), out1.begin(), out1.end());
  turn2.insert(turn2.end(), {11, 12, 13});
  int first_position = -1;
  const auto out2 = run_alone(scheduler, model, 2, turn2, 4, &first_position);
  EXPECT_EQ(first_position, 12);
  EXPECT_EQ(out2, reference_output(turn2, 4));
  const PrefixCacheStats stats = scheduler.prefix_cache_stats();
  EXPECT_EQ(stats.query_tokens, turn1.size() + turn2.size());
  EXPECT_EQ(stats.hit_tokens, 12u);

  // A prompt that is entirely cached still computes its last token (for its logits).
  std::vector<std::int32_t> cached(turn2.begin(), turn2.begin() + 16);
  run_alone(scheduler, model, 3, cached, 1, &first_position);
  EXPECT_EQ(first_position, 12) << "a page whose last token must be computed is not taken";
  EXPECT_EQ(scheduler.prefix_cache_stats().hit_tokens, 12u + 12u);
}

TEST(SchedulerPrefixCache, CachedPagesAreEvictedForNewWorkAndCountAsFree) {
  // 8 pages of 4: a 20-token request caches 5 pages; a different one needs 7.
  Scheduler scheduler(cache_config(4, 8, AdmissionPolicy::kReserve));
  FakeModel model(scheduler);
  std::vector<std::int32_t> a(20, 3);
  run_alone(scheduler, model, 1, a, 1);
  EXPECT_EQ(scheduler.prefix_cache_stats().cached_pages, 5);
  EXPECT_EQ(scheduler.pool().free_pages(), 3);
  std::vector<std::int32_t> b(24, 4);
  const auto out = run_alone(scheduler, model, 2, b, 4);
  EXPECT_EQ(out, reference_output(b, 4));
  EXPECT_GE(scheduler.prefix_cache_stats().evictions, 4u);
  EXPECT_EQ(scheduler.preemptions(), 0u);
}

TEST(SchedulerPrefixCache, WithoutTheCacheNothingIsKept) {
  SchedulerConfig c = cache_config(4, 32, AdmissionPolicy::kReserve);
  c.prefix_cache = false;
  Scheduler scheduler(c);
  FakeModel model(scheduler);
  std::vector<std::int32_t> p{1, 2, 3, 4, 5, 6, 7, 8, 9};
  run_alone(scheduler, model, 1, p, 3);
  int first_position = -1;
  run_alone(scheduler, model, 2, p, 3, &first_position);
  EXPECT_EQ(first_position, 0);
  EXPECT_EQ(scheduler.pool().used_pages(), 0);
  EXPECT_EQ(scheduler.prefix_cache_stats().hit_tokens, 0u);
}

// Item 6 of issue #19: a small pool filled with shared prefixes (a few system prompts, multi-
// turn histories, siblings sharing a prompt), with evictions, cancellations and (optimistic
// mode) preemptions. Every output matches a cacheless run, reserve mode never preempts, and
// every page returns to the pool at the end.
void stress(AdmissionPolicy admission, int page_size, unsigned seed) {
  SCOPED_TRACE(testing::Message() << "page_size " << page_size << " seed " << seed);
  kv::PagePool pool(160 / page_size, page_size);
  std::mt19937 rng(seed);
  std::uint64_t hits = 0;
  std::uint64_t preemptions = 0;
  std::uint64_t evictions = 0;
  {
    Scheduler scheduler(cache_config(page_size, 0, admission), pool);
    FakeModel model(scheduler);
    std::vector<std::vector<std::int32_t>> systems;
    for (int s = 0; s < 3; ++s) {
      std::vector<std::int32_t> sys;
      for (int i = 0; i < 12 + 5 * s; ++i)
        sys.push_back(static_cast<std::int32_t>(rng() % 50));
      systems.push_back(sys);
    }
    struct Expect {
      std::vector<std::int32_t> prompt;
      int max_new;
    };
    std::map<std::uint64_t, Expect> live;
    std::vector<std::vector<std::int32_t>> histories;  // finished prompts + outputs
    std::uint64_t next_id = 1;
    int finished = 0, cancelled = 0;
    for (int step = 0; step < 1500; ++step) {
      // Arrivals: a new conversation, or the next turn of a finished one.
      if (rng() % 3 == 0 && scheduler.waiting() < 6) {
        std::vector<std::int32_t> prompt;
        if (!histories.empty() && rng() % 2 == 0) {
          prompt = histories[rng() % histories.size()];
        } else {
          prompt = systems[rng() % systems.size()];
        }
        const int user = 1 + static_cast<int>(rng() % 10);
        for (int i = 0; i < user; ++i)
          prompt.push_back(static_cast<std::int32_t>(rng() % 50));
        if (prompt.size() > 90) prompt.resize(90);
        const int max_new = 1 + static_cast<int>(rng() % 12);
        const std::uint64_t id = next_id++;
        ASSERT_TRUE(scheduler.add(id, prompt, max_new).ok());
        live[id] = {prompt, max_new};
        if (rng() % 6 == 0) {  // a second sample sharing the prompt's pages
          const std::uint64_t sib = next_id++;
          ASSERT_TRUE(scheduler.add_sibling(sib, id).ok());
          live[sib] = {prompt, max_new};
        }
      }
      // Cancellations, running or waiting.
      if (!live.empty() && rng() % 25 == 0) {
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng() % live.size()));
        EXPECT_TRUE(scheduler.remove(it->first));
        live.erase(it);
        ++cancelled;
      }
      StepPlan plan = scheduler.plan_step();
      scheduler.complete_step(plan, model.run(plan));
      for (const auto& slice : plan.slices) {
        auto it = live.find(slice.id);
        if (it == live.end()) continue;
        const Sequence* s = scheduler.find(slice.id);
        if (s->generated() < it->second.max_new) continue;
        std::vector<std::int32_t> out(s->tokens.begin() + s->prompt_len, s->tokens.end());
        EXPECT_EQ(out, reference_output(it->second.prompt, it->second.max_new))
            << "request " << slice.id;
        histories.push_back(s->tokens);
        if (histories.size() > 20) histories.erase(histories.begin());
        EXPECT_TRUE(scheduler.remove(slice.id));
        live.erase(it);
        ++finished;
      }
      EXPECT_LE(scheduler.pool().evictable_pages(), scheduler.prefix_cache_stats().cached_pages);
    }
    // Drain what is left.
    for (int step = 0; step < 5000 && !live.empty(); ++step) {
      StepPlan plan = scheduler.plan_step();
      scheduler.complete_step(plan, model.run(plan));
      for (const auto& slice : plan.slices) {
        auto it = live.find(slice.id);
        if (it == live.end()) continue;
        const Sequence* s = scheduler.find(slice.id);
        if (s->generated() < it->second.max_new) continue;
        std::vector<std::int32_t> out(s->tokens.begin() + s->prompt_len, s->tokens.end());
        EXPECT_EQ(out, reference_output(it->second.prompt, it->second.max_new));
        scheduler.remove(slice.id);
        live.erase(it);
        ++finished;
      }
    }
    EXPECT_TRUE(live.empty()) << live.size() << " requests never finished";
    EXPECT_GT(finished, 100);
    EXPECT_GT(cancelled, 10);
    const PrefixCacheStats stats = scheduler.prefix_cache_stats();
    hits = stats.hit_tokens;
    evictions = stats.evictions;
    preemptions = scheduler.preemptions();
    // Nothing runs: every page held is the cache's, and all of them could be evicted.
    EXPECT_EQ(pool.used_pages(), stats.cached_pages);
    EXPECT_EQ(pool.evictable_pages(), stats.cached_pages);
  }
  EXPECT_EQ(pool.used_pages(), 0) << "pages leaked";
  EXPECT_GT(hits, 0u);
  EXPECT_GT(evictions, 0u) << "the pool was meant to fill up";
  if (admission == AdmissionPolicy::kReserve) {
    EXPECT_EQ(preemptions, 0u) << "reserve admission must stay never-OOM with the cache";
  } else {
    EXPECT_GT(preemptions, 0u) << "the mix was meant to run the pool dry";
  }
}

TEST(SchedulerPrefixCache, StressReserveReturnsEveryPage) {
  for (int page_size : {1, 4, 16})
    stress(AdmissionPolicy::kReserve, page_size, 3);
}

TEST(SchedulerPrefixCache, StressOptimisticWithPreemptionsReturnsEveryPage) {
  for (int page_size : {1, 4, 16})
    stress(AdmissionPolicy::kOptimistic, page_size, 5);
}

}  // namespace
}  // namespace weft::sched
