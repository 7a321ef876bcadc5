// Sequence groups (Scheduler::set_groups, docs/parallel.md): each group's steps are planned and
// completed apart, so one group is planned while another's step is still out; a plan touches
// only its group's sequences, new requests fill the group short of its share, preemption
// never takes another group's sequence, and outputs equal those of one group.

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <set>

#include "runtime/scheduler/scheduler.hpp"

namespace weft::sched {
namespace {

std::int32_t next_token(std::uint64_t id, int position) {
  return static_cast<std::int32_t>((id * 7919 + static_cast<std::uint64_t>(position) * 104729) %
                                   1000);
}

// The token a slice that samples gets: a function of the sequence and its position only.
std::vector<std::int32_t> fake_sample(const Scheduler& s, const StepPlan& plan) {
  std::vector<std::int32_t> out;
  for (const auto& slice : plan.slices) {
    if (!slice.samples) continue;
    (void)s;
    out.push_back(next_token(slice.id, slice.first_position + slice.token_count));
  }
  return out;
}

SchedulerConfig config(int pages, AdmissionPolicy admission = AdmissionPolicy::kReserve) {
  SchedulerConfig c;
  c.page_size = 4;
  c.num_pages = pages;
  c.max_tokens_per_step = 64;
  c.admission = admission;
  return c;
}

// Runs every request to the end with `groups` groups, `groups` steps out at once: each group's
// plan is completed only after the other groups have planned theirs. Returns the outputs.
std::map<std::uint64_t, std::vector<std::int32_t>> run(Scheduler& s, int groups,
                                                       const std::vector<std::pair<int, int>>& reqs,
                                                       int* max_in_flight = nullptr) {
  std::map<std::uint64_t, std::vector<std::int32_t>> out;
  std::map<std::uint64_t, int> lengths;
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    const auto id = static_cast<std::uint64_t>(i + 1);
    std::vector<std::int32_t> prompt(static_cast<std::size_t>(reqs[i].first));
    for (std::size_t k = 0; k < prompt.size(); ++k)
      prompt[k] = static_cast<std::int32_t>(k + i);
    EXPECT_TRUE(s.add(id, prompt, reqs[i].second));
    lengths[id] = reqs[i].first;
  }
  s.set_groups(groups);
  std::deque<StepPlan> in_flight;
  int peak = 0;
  for (int round = 0; round < 10000 && (s.running() + s.waiting() > 0 || !in_flight.empty());
       ++round) {
    // Plan every group that has no step out.
    for (int g = 0; g < groups; ++g) {
      const bool out_now = std::any_of(in_flight.begin(), in_flight.end(),
                                       [&](const StepPlan& p) { return p.group == g; });
      if (out_now) continue;
      StepPlan plan = s.plan_step(g);
      if (plan.empty()) continue;
      // No sequence is in two steps out at once.
      for (const auto& other : in_flight) {
        for (const auto& a : plan.slices) {
          for (const auto& b : other.slices)
            EXPECT_NE(a.id, b.id) << "sequence " << a.id << " in two steps at once";
        }
      }
      for (const auto& slice : plan.slices)
        EXPECT_EQ(s.find(slice.id)->group, groups > 1 ? g : -1);
      // Planning this group left the steps out untouched (nothing preempted or moved).
      for (const auto& other : in_flight) {
        for (const auto& b : other.slices) {
          const Sequence* seq = s.find(b.id);
          EXPECT_NE(seq, nullptr);
          if (seq == nullptr) continue;
          EXPECT_EQ(seq->computed, b.first_position) << "sequence " << b.id << " preempted";
          EXPECT_EQ(seq->group, other.group);
        }
      }
      in_flight.push_back(std::move(plan));
    }
    peak = std::max(peak, static_cast<int>(in_flight.size()));
    if (in_flight.empty()) continue;
    StepPlan done = std::move(in_flight.front());
    in_flight.pop_front();
    s.complete_step(done, fake_sample(s, done));
    for (const auto& slice : done.slices) {
      const Sequence* seq = s.find(slice.id);
      if (seq != nullptr && seq->generated() >= seq->max_new_tokens) {
        out[slice.id].assign(seq->tokens.begin() + seq->prompt_len, seq->tokens.end());
        s.remove(slice.id);
      }
    }
  }
  if (max_in_flight != nullptr) *max_in_flight = peak;
  return out;
}

const std::vector<std::pair<int, int>> kRequests = {{5, 7}, {9, 3},  {2, 12}, {13, 5},
                                                    {4, 9}, {7, 11}, {3, 4},  {11, 6}};

TEST(SchedulerGroups, TwoGroupsGiveTheOutputsOfOne) {
  Scheduler one(config(256));
  const auto expected = run(one, 1, kRequests);
  ASSERT_EQ(expected.size(), kRequests.size());
  Scheduler two(config(256));
  int peak = 0;
  const auto got = run(two, 2, kRequests, &peak);
  EXPECT_EQ(got, expected);
  EXPECT_EQ(peak, 2);
  EXPECT_EQ(two.pool().held_pages(), 0);
}

TEST(SchedulerGroups, NewRequestsFillTheGroupShortOfItsShare) {
  Scheduler s(config(256));
  s.set_groups(2);
  for (std::uint64_t id = 1; id <= 4; ++id)
    ASSERT_TRUE(s.add(id, {1, 2, 3}, 8));
  const StepPlan a = s.plan_step(0);
  EXPECT_EQ(a.group, 0);
  EXPECT_EQ(a.slices.size(), 2u) << "group 0 takes its share, ceil(4 / 2)";
  const StepPlan b = s.plan_step(1);
  EXPECT_EQ(b.slices.size(), 2u);
  EXPECT_EQ(s.group_size(0), 2);
  EXPECT_EQ(s.group_size(1), 2);
  // A fifth request while both steps are out: the next group planned takes it.
  ASSERT_TRUE(s.add(5, {4, 5}, 8));
  s.complete_step(a, fake_sample(s, a));
  const StepPlan a2 = s.plan_step(0);
  std::set<std::uint64_t> ids;
  for (const auto& slice : a2.slices)
    ids.insert(slice.id);
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids.count(5), 1u);
  for (const auto& slice : b.slices)
    EXPECT_EQ(ids.count(slice.id), 0u) << "group 1's step is still out";
}

TEST(SchedulerGroups, AQueueLongerThanMaxRunningIsSharedOut) {
  SchedulerConfig c = config(256);
  c.max_running = 4;
  Scheduler s(c);
  s.set_groups(2);
  for (std::uint64_t id = 1; id <= 10; ++id)
    ASSERT_TRUE(s.add(id, {1, 2, 3}, 8));
  const StepPlan a = s.plan_step(0);
  const StepPlan b = s.plan_step(1);
  EXPECT_EQ(a.slices.size(), 2u) << "group 0 took more than half of max_running";
  EXPECT_EQ(b.slices.size(), 2u);
  EXPECT_EQ(s.running(), 4);
}

TEST(SchedulerGroups, PreemptionTakesOnlyThePlannedGroupsSequences) {
  // Optimistic admission in a pool too small for every output: plans must preempt, and a
  // sequence of the group whose step is out must keep its pages.
  Scheduler s(config(10, AdmissionPolicy::kOptimistic));
  int peak = 0;
  std::vector<std::pair<int, int>> reqs = {{4, 12}, {4, 12}, {4, 12}, {4, 12}};
  Scheduler reference(config(64));
  const auto expected = run(reference, 1, reqs);
  const auto got = run(s, 2, reqs, &peak);
  EXPECT_EQ(got, expected);
  EXPECT_GT(s.preemptions(), 0u) << "the pool was meant to run dry";
  EXPECT_EQ(s.pool().held_pages(), 0);
}

}  // namespace
}  // namespace weft::sched
