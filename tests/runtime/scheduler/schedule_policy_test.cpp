// The waiting queue's order (SchedulerConfig::schedule): longest output first admits by
// max_new_tokens, ties in arrival order, and never moves a preempted sequence back.

#include <gtest/gtest.h>

#include "runtime/scheduler/scheduler.hpp"

namespace weft::sched {
namespace {

std::vector<std::int32_t> prompt(int n) {
  return std::vector<std::int32_t>(static_cast<std::size_t>(n), 3);
}

// The ids a run admits, in order, one request a step (the budget fits one 4-token prompt).
std::vector<std::uint64_t> admission_order(SchedulePolicy policy,
                                           const std::vector<int>& max_new_tokens) {
  SchedulerConfig config;
  config.page_size = 4;
  config.num_pages = 256;
  config.max_tokens_per_step = 4 + 16;  // one prompt and the decodes
  config.max_running = 64;
  config.schedule = policy;
  Scheduler s(config);
  for (std::size_t i = 0; i < max_new_tokens.size(); ++i)
    EXPECT_TRUE(s.add(i + 1, prompt(4), max_new_tokens[i]));
  std::vector<std::uint64_t> order;
  for (int step = 0; step < 200 && (s.running() + s.waiting()) > 0; ++step) {
    StepPlan plan = s.plan_step();
    order.insert(order.end(), plan.admitted.begin(), plan.admitted.end());
    s.complete_step(plan, std::vector<std::int32_t>(plan.sampling_slices(), 5));
    for (const auto& slice : plan.slices) {
      const Sequence* q = s.find(slice.id);
      if (q != nullptr && q->generated() >= q->max_new_tokens) s.remove(slice.id);
    }
  }
  return order;
}

TEST(SchedulePolicy, FirstComeAdmitsInArrivalOrder) {
  EXPECT_EQ(admission_order(SchedulePolicy::kFirstCome, {3, 9, 1, 9, 5}),
            (std::vector<std::uint64_t>{1, 2, 3, 4, 5}));
}

TEST(SchedulePolicy, LongestOutputFirstAdmitsByMaxNewTokensTiesInArrivalOrder) {
  EXPECT_EQ(admission_order(SchedulePolicy::kLongestOutputFirst, {3, 9, 1, 9, 5}),
            (std::vector<std::uint64_t>{2, 4, 5, 1, 3}));
}

TEST(SchedulePolicy, LongestOutputFirstQueuesANewRequestBehindLongerOnesOnly) {
  SchedulerConfig config;
  config.page_size = 4;
  config.num_pages = 64;
  config.max_tokens_per_step = 4;
  config.schedule = SchedulePolicy::kLongestOutputFirst;
  Scheduler s(config);
  ASSERT_TRUE(s.add(1, prompt(4), 2));
  StepPlan first = s.plan_step();  // 1 runs; the queue is empty
  ASSERT_EQ(first.admitted, std::vector<std::uint64_t>{1});
  ASSERT_TRUE(s.add(2, prompt(4), 5));
  ASSERT_TRUE(s.add(3, prompt(4), 8));
  ASSERT_TRUE(s.add(4, prompt(4), 5));
  ASSERT_TRUE(s.add(5, prompt(4), 1));
  s.complete_step(first, std::vector<std::int32_t>{5});
  // 3 first, then 2 and 4 (equal outputs) in arrival order, then 5.
  std::vector<std::uint64_t> order;
  for (int step = 0; step < 40 && s.waiting() > 0; ++step) {
    StepPlan plan = s.plan_step();
    order.insert(order.end(), plan.admitted.begin(), plan.admitted.end());
    s.complete_step(plan, std::vector<std::int32_t>(plan.sampling_slices(), 5));
    for (const auto& slice : plan.slices) {
      const Sequence* q = s.find(slice.id);
      if (q != nullptr && q->generated() >= q->max_new_tokens) s.remove(slice.id);
    }
  }
  EXPECT_EQ(order, (std::vector<std::uint64_t>{3, 2, 4, 5}));
}

TEST(SchedulePolicy, APreemptedSequenceKeepsItsPlaceAtTheFront) {
  // Optimistic admission on a pool of 3 pages of 4 tokens: an 8-token and a 3-token prompt fill
  // it; when the first needs a page for its ninth token, the second is preempted (and cannot
  // come back in that step: no page is left). A later request with a longer output must queue
  // behind it, not ahead.
  SchedulerConfig config;
  config.page_size = 4;
  config.num_pages = 3;
  config.max_tokens_per_step = 16;
  config.admission = AdmissionPolicy::kOptimistic;
  config.schedule = SchedulePolicy::kLongestOutputFirst;
  Scheduler s(config);
  ASSERT_TRUE(s.add(1, prompt(8), 4));
  ASSERT_TRUE(s.add(2, prompt(3), 3));
  StepPlan plan = s.plan_step();
  ASSERT_EQ(plan.admitted, (std::vector<std::uint64_t>{1, 2}));
  s.complete_step(plan, std::vector<std::int32_t>{5, 5});
  plan = s.plan_step();
  ASSERT_EQ(plan.preempted, std::vector<std::uint64_t>{2});
  ASSERT_EQ(s.waiting(), 1);
  s.complete_step(plan, std::vector<std::int32_t>(plan.sampling_slices(), 5));
  ASSERT_TRUE(s.add(3, prompt(4), 8));  // longer than the preempted one's 2 to come
  s.remove(1);                          // room again: the preempted sequence comes back first
  plan = s.plan_step();
  ASSERT_EQ(plan.admitted, (std::vector<std::uint64_t>{2, 3}));
}

}  // namespace
}  // namespace weft::sched
