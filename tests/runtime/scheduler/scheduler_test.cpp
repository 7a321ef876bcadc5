// The scheduler without a model: a "model" whose next token is a fixed function of the
// sequence id and position, so a sequence preempted and recomputed must still produce exactly
// the output it would have produced uninterrupted.

#include "runtime/scheduler/scheduler.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "runtime/scheduler/admission.hpp"

namespace weft::sched {
namespace {

std::int32_t fake_next_token(std::uint64_t id, int position) {
  return static_cast<std::int32_t>((id * 7919 + static_cast<std::uint64_t>(position) * 104729) %
                                   1000);
}

struct Request {
  std::uint64_t id;
  int prompt_len;
  int max_new;
};

struct RunStats {
  std::map<std::uint64_t, std::vector<std::int32_t>> outputs;
  int steps = 0;
  int max_step_tokens = 0;
  int peak_pages = 0;
  std::uint64_t preemptions = 0;
  bool decode_stalled = false;  // a running decode was left out of a step
};

// Runs `requests` (arriving `per_step` at a time) to completion.
RunStats run(Scheduler& scheduler, const std::vector<Request>& requests, int per_step) {
  RunStats stats;
  std::size_t next_request = 0;
  std::map<std::uint64_t, int> max_new;
  while (next_request < requests.size() || scheduler.running() + scheduler.waiting() > 0) {
    for (int i = 0; i < per_step && next_request < requests.size(); ++i, ++next_request) {
      const Request& r = requests[next_request];
      std::vector<std::int32_t> prompt(static_cast<std::size_t>(r.prompt_len));
      for (int p = 0; p < r.prompt_len; ++p)
        prompt[static_cast<std::size_t>(p)] = p % 50;
      EXPECT_TRUE(scheduler.add(r.id, std::move(prompt), r.max_new).ok());
      max_new[r.id] = r.max_new;
    }
    StepPlan plan = scheduler.plan_step();
    EXPECT_LE(static_cast<int>(plan.tokens.size()), scheduler.config().max_tokens_per_step);
    EXPECT_EQ(plan.tokens.size(), plan.positions.size());
    stats.max_step_tokens = std::max(stats.max_step_tokens, static_cast<int>(plan.tokens.size()));
    // Every running sequence that is decoding must be in the plan (no stalls from prefill).
    int decoding_running = 0;
    for (const auto& slice : plan.slices)
      decoding_running += slice.token_count == 1;
    std::vector<std::int32_t> sampled;
    for (const auto& slice : plan.slices) {
      // Pages cover every position the slice writes.
      const int last = slice.first_position + slice.token_count - 1;
      EXPECT_GT(static_cast<int>(slice.page_table.size()) * scheduler.config().page_size, last);
      if (slice.samples) sampled.push_back(fake_next_token(slice.id, last + 1));
    }
    scheduler.complete_step(plan, sampled);
    for (const auto& slice : plan.slices) {
      const Sequence* s = scheduler.find(slice.id);
      if (s != nullptr && s->generated() >= max_new[slice.id]) {
        stats.outputs[slice.id].assign(s->tokens.begin() + s->prompt_len, s->tokens.end());
        EXPECT_TRUE(scheduler.remove(slice.id));
      }
    }
    stats.peak_pages = std::max(stats.peak_pages, scheduler.pool().used_pages());
    EXPECT_LE(scheduler.pool().used_pages(), scheduler.pool().num_pages());
    if (++stats.steps > 100000) {
      ADD_FAILURE() << "no progress";
      break;
    }
  }
  stats.preemptions = scheduler.preemptions();
  EXPECT_EQ(scheduler.pool().free_pages(), scheduler.pool().num_pages()) << "pages leaked";
  return stats;
}

std::vector<Request> adversarial_mix(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<Request> out;
  for (int i = 0; i < n; ++i) {
    const bool long_one = rng() % 4 == 0;
    out.push_back(
        {static_cast<std::uint64_t>(i + 1),
         long_one ? 200 + static_cast<int>(rng() % 300) : 1 + static_cast<int>(rng() % 20),
         long_one ? 1 + static_cast<int>(rng() % 10) : 20 + static_cast<int>(rng() % 200)});
  }
  return out;
}

void expect_full_outputs(const RunStats& stats, const std::vector<Request>& requests) {
  ASSERT_EQ(stats.outputs.size(), requests.size()) << "a request was lost";
  for (const Request& r : requests) {
    const auto& out = stats.outputs.at(r.id);
    ASSERT_EQ(static_cast<int>(out.size()), r.max_new) << "request " << r.id;
    for (int i = 0; i < r.max_new; ++i) {
      ASSERT_EQ(out[static_cast<std::size_t>(i)], fake_next_token(r.id, r.prompt_len + i))
          << "request " << r.id << " token " << i;
    }
  }
}

TEST(Admission, MatchesLightLLMsWorkedExample) {
  // Seed 004's numpy example, (run_len, left_output_len) pairs. Sorted by left length,
  // longest first: (5,4) (4,3) (5,3) (3,2) (4,2); cumulative run lengths 5 9 14 17 21; plus
  // left * (i + 1) = 4 6 9 8 10 gives 9 15 23 25 31, so the peak is 31 tokens.
  std::vector<KvDemand> d = {{5, 4}, {4, 3}, {5, 3}, {3, 2}, {4, 2}};
  EXPECT_EQ(peak_pages(d, 1), 31);
  // Pages of 4 tokens: never below the token count rounded up, never over it by more than a
  // page per live sequence.
  const auto pages = peak_pages(d, 4);
  EXPECT_GE(pages, 8);  // 31 tokens need at least 8 pages of 4
  EXPECT_LE(pages, 8 + 5);
}

TEST(Scheduler, ReserveModeNeverPreemptsAndFinishesEverything) {
  for (int page_size : {1, 16}) {
    Scheduler scheduler({page_size, 4000 / page_size, 256, 64, AdmissionPolicy::kReserve});
    auto requests = adversarial_mix(300, 7);
    RunStats stats = run(scheduler, requests, 9);
    expect_full_outputs(stats, requests);
    EXPECT_EQ(stats.preemptions, 0u);
    EXPECT_LE(stats.max_step_tokens, 256);
  }
}

TEST(Scheduler, OptimisticModePreemptsByRecomputeAndLosesNothing) {
  Scheduler scheduler({8, 120, 128, 64, AdmissionPolicy::kOptimistic});
  auto requests = adversarial_mix(200, 11);
  RunStats stats = run(scheduler, requests, 20);
  expect_full_outputs(stats, requests);
  EXPECT_GT(stats.preemptions, 0u) << "the mix was meant to run the pool dry";
}

TEST(Scheduler, LongPromptIsChunkedAndDoesNotStallDecodes) {
  Scheduler scheduler({16, 1000, 64, 16, AdmissionPolicy::kReserve});
  ASSERT_TRUE(scheduler.add(1, std::vector<std::int32_t>(5, 1), 100).ok());
  StepPlan first = scheduler.plan_step();
  ASSERT_EQ(first.slices.size(), 1u);
  scheduler.complete_step(first, std::vector<std::int32_t>{7});
  ASSERT_TRUE(scheduler.add(2, std::vector<std::int32_t>(1000, 2), 4).ok());
  int chunks = 0;
  for (int step = 0; step < 20; ++step) {
    StepPlan plan = scheduler.plan_step();
    ASSERT_GE(plan.slices.size(), 1u);
    EXPECT_EQ(plan.slices[0].id, 1u) << "the running decode comes first in every step";
    EXPECT_EQ(plan.slices[0].token_count, 1);
    std::vector<std::int32_t> sampled;
    for (const auto& s : plan.slices) {
      if (s.id == 2) {
        ++chunks;
        EXPECT_LE(s.token_count, 63);
      }
      if (s.samples) sampled.push_back(9);
    }
    scheduler.complete_step(plan, sampled);
  }
  EXPECT_GE(chunks, 16);
}

TEST(Scheduler, RemoveFreesPagesAtOnceAndUnknownIdIsANoOp) {
  Scheduler scheduler({4, 50, 64, 8, AdmissionPolicy::kReserve});
  ASSERT_TRUE(scheduler.add(1, std::vector<std::int32_t>(40, 3), 10).ok());
  StepPlan plan = scheduler.plan_step();
  scheduler.complete_step(plan, std::vector<std::int32_t>{1});
  EXPECT_EQ(scheduler.pool().used_pages(), 10);
  EXPECT_TRUE(scheduler.remove(1));
  EXPECT_EQ(scheduler.pool().used_pages(), 0);
  EXPECT_FALSE(scheduler.remove(1));
  EXPECT_FALSE(scheduler.remove(12345));
}

// The engine's scheduler borrows the KV allocator's pool: its pages are the pool's, and the
// pool is whole again once the scheduler is gone.
TEST(Scheduler, AllocatesFromALentPoolAndGivesItBack) {
  kv::PagePool pool(50, 4);
  {
    Scheduler scheduler({4, 0, 64, 8, AdmissionPolicy::kReserve}, pool);
    EXPECT_EQ(scheduler.config().num_pages, 50);
    EXPECT_EQ(&scheduler.pool(), &pool);
    ASSERT_TRUE(scheduler.add(1, std::vector<std::int32_t>(40, 3), 10).ok());
    ASSERT_TRUE(scheduler.add(2, std::vector<std::int32_t>(8, 3), 4).ok());
    StepPlan plan = scheduler.plan_step();
    scheduler.complete_step(plan, std::vector<std::int32_t>{1, 1});
    EXPECT_EQ(pool.used_pages(), 10 + 2);
    EXPECT_TRUE(scheduler.remove(2));
    EXPECT_EQ(pool.used_pages(), 10);
    auto too_big = scheduler.add(3, std::vector<std::int32_t>(190, 1), 20);
    ASSERT_FALSE(too_big.ok());
    EXPECT_NE(std::string(too_big.error().what()).find("the pool has 50"), std::string::npos);
  }
  EXPECT_EQ(pool.used_pages(), 0) << "a destroyed scheduler keeps no pages";
  EXPECT_EQ(pool.peak_used_pages(), 12);
  EXPECT_THROW(Scheduler({16, 0, 64, 8, AdmissionPolicy::kReserve}, pool), Error)
      << "page sizes differ";
  EXPECT_THROW(Scheduler({4, 49, 64, 8, AdmissionPolicy::kReserve}, pool), Error)
      << "page counts differ";
  EXPECT_NO_THROW(Scheduler({4, 50, 64, 8, AdmissionPolicy::kReserve}, pool));
}

TEST(Scheduler, RefusesWhatCanNeverFitAndBadRequests) {
  Scheduler scheduler({16, 10, 64, 8, AdmissionPolicy::kReserve});
  auto too_big = scheduler.add(1, std::vector<std::int32_t>(150, 1), 20);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.error().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(std::string(too_big.error().what()).find("the pool has 10"), std::string::npos);
  EXPECT_FALSE(scheduler.add(2, {}, 5).ok());
  EXPECT_FALSE(scheduler.add(3, {1}, 0).ok());
  ASSERT_TRUE(scheduler.add(4, {1}, 1).ok());
  EXPECT_FALSE(scheduler.add(4, {1}, 1).ok()) << "duplicate live id";
}

}  // namespace
}  // namespace weft::sched

namespace weft::sched {
namespace {

// Small pools, small step budgets and prompts that each fit the pool alone, in random
// mixes: optimistic admission must never leave every running sequence waiting for pages.
TEST(Scheduler, OptimisticModeAlwaysMakesProgressOnTinyPools) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 400; ++trial) {
    const int page = 1 << (rng() % 3);
    const int pages = 3 + static_cast<int>(rng() % 10);
    const int budget = 1 + static_cast<int>(rng() % 12);
    Scheduler scheduler({page, pages, budget, 8, AdmissionPolicy::kOptimistic});
    std::vector<Request> requests;
    const int n = 2 + static_cast<int>(rng() % 5);
    for (int r = 0; r < n; ++r) {
      const int capacity = pages * page;
      const int prompt = 1 + static_cast<int>(rng() % static_cast<unsigned>(capacity - 1));
      const int max_new = 1 + static_cast<int>(rng() % static_cast<unsigned>(capacity - prompt));
      if (peak_pages({KvDemand{prompt, max_new}}, page) > pages) continue;
      requests.push_back({static_cast<std::uint64_t>(r + 1), prompt, max_new});
    }
    RunStats stats = run(scheduler, requests, 1 + static_cast<int>(rng() % 3));
    expect_full_outputs(stats, requests);
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "trial " << trial << ": page " << page << ", pages " << pages << ", budget "
                    << budget;
      return;
    }
  }
}

}  // namespace
}  // namespace weft::sched

namespace weft::sched {
namespace {

// n samples of one prompt: siblings share the parent's full prompt pages (reference counts
// above 1) and still produce their own full outputs; every page is free at the end.
TEST(Scheduler, SiblingsShareThePromptsFullPages) {
  Scheduler scheduler({4, 64, 64, 8, AdmissionPolicy::kReserve});
  ASSERT_TRUE(scheduler.add(1, std::vector<std::int32_t>(30, 5), 6).ok());
  ASSERT_TRUE(scheduler.add_sibling(2, 1).ok());
  ASSERT_TRUE(scheduler.add_sibling(3, 1).ok());
  EXPECT_FALSE(scheduler.add_sibling(4, 99).ok()) << "sibling of an unknown request";
  std::map<std::uint64_t, int> outputs;
  bool saw_sharing = false;
  int prefilled_by_siblings = 0;
  for (int step = 0; step < 100 && scheduler.running() + scheduler.waiting() > 0; ++step) {
    StepPlan plan = scheduler.plan_step();
    std::vector<std::int32_t> sampled;
    for (const auto& slice : plan.slices) {
      if (slice.id != 1 && slice.token_count > 1) prefilled_by_siblings += slice.token_count;
      if (slice.samples)
        sampled.push_back(fake_next_token(slice.id, slice.first_position + slice.token_count));
    }
    scheduler.complete_step(plan, sampled);
    if (scheduler.find(2) != nullptr && !scheduler.find(2)->pages.empty()) {
      saw_sharing |= scheduler.pool().ref_count(scheduler.find(2)->pages[0]) == 3;
    }
    for (std::uint64_t id : {1, 2, 3}) {
      const Sequence* s = scheduler.find(id);
      if (s != nullptr && s->generated() == 6) {
        outputs[id] = s->generated();
        // Each sample's output is its own: the fake model keys tokens by sequence id.
        for (int i = 0; i < 6; ++i) {
          EXPECT_EQ(s->tokens[static_cast<std::size_t>(30 + i)], fake_next_token(id, 30 + i));
        }
        scheduler.remove(id);
      }
    }
  }
  EXPECT_EQ(outputs.size(), 3u);
  EXPECT_TRUE(saw_sharing) << "the parent's first page should be held by all three samples";
  // 30 prompt tokens, pages of 4: 7 full pages (28 tokens) are shared, so each sibling
  // prefills only the last 2 prompt tokens.
  EXPECT_EQ(prefilled_by_siblings, 2 * 2);
  EXPECT_EQ(scheduler.pool().used_pages(), 0);
}

// Jump-forward: tokens appended without sampling are prefilled by the next step as one slice
// that samples after its last token, and never past max_new_tokens.
TEST(Scheduler, AppendedTokensArePrefilledAsOneSliceThatSamples) {
  Scheduler scheduler(SchedulerConfig{.page_size = 4, .num_pages = 16});
  ASSERT_TRUE(scheduler.add(1, {10, 11, 12}, 6).ok());
  StepPlan prefill = scheduler.plan_step();
  ASSERT_EQ(prefill.slices.size(), 1u);
  const std::int32_t first = 20;
  scheduler.complete_step(prefill, std::span<const std::int32_t>(&first, 1));
  const std::vector<std::int32_t> forced = {21, 22, 23};
  EXPECT_EQ(scheduler.append_tokens(1, forced), 3);
  StepPlan next = scheduler.plan_step();
  ASSERT_EQ(next.slices.size(), 1u);
  EXPECT_EQ(next.slices[0].token_count, 4);  // the sampled token and the three forced
  EXPECT_TRUE(next.slices[0].samples);
  EXPECT_EQ(next.tokens, (std::vector<std::int32_t>{20, 21, 22, 23}));
  EXPECT_EQ(next.slices[0].first_position, 3);
  const std::int32_t second = 24;
  scheduler.complete_step(next, std::span<const std::int32_t>(&second, 1));
  EXPECT_EQ(scheduler.find(1)->generated(), 5);
  // One token of the budget is left.
  EXPECT_EQ(scheduler.append_tokens(1, forced), 1);
  EXPECT_EQ(scheduler.find(1)->generated(), 6);
  EXPECT_EQ(scheduler.append_tokens(1, forced), 0);
  EXPECT_EQ(scheduler.append_tokens(99, forced), 0);  // unknown id
}

}  // namespace
}  // namespace weft::sched
