// Encoder-decoder sequences in the scheduler (Scheduler::add_seq2seq): the encoder pass of a
// newly admitted sequence is planned in the same step as other sequences' decoder tokens, its
// cross-attention pages are counted by admission for its whole life (reserve never
// over-commits), freed on finish and cancel, and taken again with a new encoder pass after an
// optimistic preemption.

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "runtime/scheduler/scheduler.hpp"

namespace weft::sched {
namespace {

std::int32_t fake_next_token(std::uint64_t id, int position) {
  return static_cast<std::int32_t>((id * 7919 + static_cast<std::uint64_t>(position) * 104729) %
                                   1000);
}

std::vector<std::int32_t> source_of(int length, int salt = 0) {
  std::vector<std::int32_t> s;
  for (int i = 0; i < length; ++i)
    s.push_back((i * 13 + salt) % 97);
  return s;
}

// Checks one plan's seq2seq slices against the scheduler's sequences: cross pages cover the
// source, are disjoint from every self page of the step, and encoder tokens come exactly when
// the sequence has computed nothing yet.
void check_plan(const Scheduler& scheduler, const StepPlan& plan) {
  std::set<std::int32_t> self, cross;
  const int page_size = scheduler.config().page_size;
  for (const auto& slice : plan.slices) {
    const Sequence* s = scheduler.find(slice.id);
    ASSERT_NE(s, nullptr);
    ASSERT_FALSE(s->source.empty());
    EXPECT_EQ(slice.cross_length, static_cast<int>(s->source.size()));
    EXPECT_EQ(static_cast<int>(slice.cross_page_table.size()),
              (slice.cross_length + page_size - 1) / page_size);
    EXPECT_EQ(!slice.encoder_tokens.empty(), slice.first_position == 0) << "sequence " << slice.id;
    if (!slice.encoder_tokens.empty()) EXPECT_EQ(slice.encoder_tokens, s->source);
    for (auto p : slice.page_table)
      self.insert(p);
    for (auto p : slice.cross_page_table)
      EXPECT_TRUE(cross.insert(p).second) << "cross page " << p << " held twice";
  }
  for (auto p : cross)
    EXPECT_EQ(self.count(p), 0u) << "page " << p << " is both a cross and a self page";
}

struct Seq2SeqRun {
  std::map<std::uint64_t, std::vector<std::int32_t>> outputs;
  int steps = 0;
  int encoder_passes = 0;
  int steps_mixing_encode_and_decode = 0;
};

// Adds every request at once and runs them all to their max_new tokens.
Seq2SeqRun run_all(Scheduler& scheduler,
                   const std::vector<std::pair<int, int>>& source_and_max_new) {
  Seq2SeqRun run;
  std::map<std::uint64_t, int> max_new;
  std::uint64_t id = 1;
  for (const auto& [len, max] : source_and_max_new) {
    EXPECT_TRUE(scheduler.add_seq2seq(id, source_of(len, static_cast<int>(id)), {0}, max).ok());
    max_new[id++] = max;
  }
  while (scheduler.running() + scheduler.waiting() > 0) {
    StepPlan plan = scheduler.plan_step();
    check_plan(scheduler, plan);
    EXPECT_LE(scheduler.pool().used_pages(), scheduler.pool().num_pages());
    bool encodes = false, decodes = false;
    std::vector<std::int32_t> sampled;
    for (const auto& slice : plan.slices) {
      encodes |= !slice.encoder_tokens.empty();
      decodes |= slice.encoder_tokens.empty();
      run.encoder_passes += !slice.encoder_tokens.empty();
      const int last = slice.first_position + slice.token_count - 1;
      EXPECT_GT(static_cast<int>(slice.page_table.size()) * scheduler.config().page_size, last);
      if (slice.samples) sampled.push_back(fake_next_token(slice.id, last + 1));
    }
    run.steps_mixing_encode_and_decode += encodes && decodes;
    scheduler.complete_step(plan, sampled);
    for (const auto& slice : plan.slices) {
      const Sequence* s = scheduler.find(slice.id);
      if (s != nullptr && s->generated() >= max_new[slice.id]) {
        run.outputs[slice.id].assign(s->tokens.begin() + s->prompt_len, s->tokens.end());
        EXPECT_TRUE(scheduler.remove(slice.id));
      }
    }
    if (++run.steps > 100000) {
      ADD_FAILURE() << "no progress";
      break;
    }
  }
  for (const auto& [seq, out] : run.outputs) {
    EXPECT_EQ(static_cast<int>(out.size()), max_new[seq]);
    for (std::size_t k = 0; k < out.size(); ++k)
      EXPECT_EQ(out[k], fake_next_token(seq, static_cast<int>(k) + 1)) << seq << " token " << k;
  }
  EXPECT_EQ(scheduler.pool().free_pages(), scheduler.pool().num_pages()) << "pages leaked";
  return run;
}

TEST(Seq2SeqScheduler, EncoderPassesRunInTheStepOfOtherSequencesDecodeTokens) {
  SchedulerConfig config;
  config.page_size = 4;
  config.num_pages = 64;
  Scheduler scheduler(config);
  ASSERT_TRUE(scheduler.add_seq2seq(1, source_of(10), {0, 7}, 5).ok());
  StepPlan first = scheduler.plan_step();
  ASSERT_EQ(first.slices.size(), 1u);
  EXPECT_EQ(first.slices[0].encoder_tokens, source_of(10));
  EXPECT_EQ(first.slices[0].cross_length, 10);
  EXPECT_EQ(first.slices[0].cross_page_table.size(), 3u);
  EXPECT_EQ(first.slices[0].token_count, 2);  // the decoder's start token and forced prefix
  EXPECT_EQ(first.tokens, (std::vector<std::int32_t>{0, 7}));
  EXPECT_TRUE(first.slices[0].samples);
  EXPECT_EQ(scheduler.pool().used_pages(), 3 + 1);
  scheduler.complete_step(first, std::vector<std::int32_t>{42});

  ASSERT_TRUE(scheduler.add_seq2seq(2, source_of(5, 1), {0}, 5).ok());
  StepPlan second = scheduler.plan_step();
  check_plan(scheduler, second);
  ASSERT_EQ(second.slices.size(), 2u);
  EXPECT_EQ(second.slices[0].id, 1u);  // the decode token first, without an encoder pass
  EXPECT_TRUE(second.slices[0].encoder_tokens.empty());
  EXPECT_EQ(second.slices[0].cross_page_table, first.slices[0].cross_page_table);
  EXPECT_EQ(second.slices[0].first_position, 2);
  EXPECT_EQ(second.slices[1].id, 2u);
  EXPECT_EQ(second.slices[1].encoder_tokens, source_of(5, 1));
  EXPECT_EQ(scheduler.pool().used_pages(), 3 + 1 + 2 + 1);

  EXPECT_TRUE(scheduler.remove(1));  // finish or cancel: cross pages go back too
  EXPECT_TRUE(scheduler.remove(2));
  EXPECT_EQ(scheduler.pool().free_pages(), 64);
}

TEST(Seq2SeqScheduler, ReserveAdmissionCountsCrossPagesAndNeverOverCommits) {
  SchedulerConfig config;
  config.page_size = 4;
  config.num_pages = 10;
  Scheduler scheduler(config);
  // Each: 4 cross pages and 8 decoder tokens (2 pages): 6 pages, so two never run at once.
  const Seq2SeqRun run = run_all(scheduler, {{16, 7}, {16, 7}, {3, 2}});
  EXPECT_EQ(run.outputs.size(), 3u);
  EXPECT_EQ(run.encoder_passes, 3);
  EXPECT_EQ(scheduler.preemptions(), 0u);
  // Alone it could never fit: refused up front, naming the cross pages.
  auto refused = scheduler.add_seq2seq(9, source_of(40), {0}, 4);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(std::string(refused.error().what()).find("10 for its 40 encoder tokens"),
            std::string::npos)
      << refused.error().what();
}

TEST(Seq2SeqScheduler, ManyRequestsBatchEncoderPassesAndDecodeSteps) {
  SchedulerConfig config;
  config.page_size = 4;
  config.num_pages = 200;
  config.max_tokens_per_step = 32;
  Scheduler scheduler(config);
  std::vector<std::pair<int, int>> requests;
  for (int i = 0; i < 12; ++i)
    requests.push_back({3 + (i * 7) % 20, 4 + (i * 5) % 13});
  const Seq2SeqRun run = run_all(scheduler, requests);
  EXPECT_EQ(run.outputs.size(), 12u);
  EXPECT_EQ(run.encoder_passes, 12);
  EXPECT_GT(run.steps_mixing_encode_and_decode, 0);
  EXPECT_LT(run.steps, 40);  // batched: the longest request is 16 tokens
}

TEST(Seq2SeqScheduler, EncoderTokensCountAgainstTheStepBudget) {
  SchedulerConfig config;
  config.page_size = 4;
  config.num_pages = 200;
  // 17: the second step holds 1's decode token, then 10 + 1 and 4 + 1 (a later encoder pass
  // must leave one token of the budget for its decoder).
  config.max_tokens_per_step = 17;
  Scheduler scheduler(config);
  ASSERT_TRUE(scheduler.add_seq2seq(1, source_of(40), {0}, 3).ok());  // longer than the budget
  ASSERT_TRUE(scheduler.add_seq2seq(2, source_of(10), {0}, 3).ok());
  ASSERT_TRUE(scheduler.add_seq2seq(3, source_of(4), {0}, 3).ok());
  StepPlan first = scheduler.plan_step();
  ASSERT_EQ(first.slices.size(), 1u) << "a long source runs, as the step's only encoder pass";
  EXPECT_EQ(first.slices[0].encoder_tokens.size(), 40u);
  scheduler.complete_step(first, std::vector<std::int32_t>{5});
  StepPlan second = scheduler.plan_step();
  ASSERT_EQ(second.slices.size(), 3u);  // 1's decode token, then 10 + 1 and 4 + 1 tokens
  EXPECT_EQ(second.slices[1].encoder_tokens.size(), 10u);
  EXPECT_EQ(second.slices[2].encoder_tokens.size(), 4u);
}

TEST(Seq2SeqScheduler, OptimisticPreemptionFreesCrossPagesAndEncodesAgain) {
  SchedulerConfig config;
  config.page_size = 2;
  config.num_pages = 16;
  config.admission = AdmissionPolicy::kOptimistic;
  Scheduler scheduler(config);
  // Three requests of 2 cross pages whose outputs outgrow the pool together.
  const Seq2SeqRun run = run_all(scheduler, {{4, 12}, {4, 12}, {4, 12}});
  EXPECT_GT(scheduler.preemptions(), 0u);
  EXPECT_GT(run.encoder_passes, 3) << "a preempted sequence encodes again when readmitted";
  EXPECT_EQ(run.outputs.size(), 3u);
}

TEST(Seq2SeqScheduler, SiblingsShareTheSourceAndEncodeTheirOwn) {
  SchedulerConfig config;
  config.page_size = 4;
  config.num_pages = 64;
  Scheduler scheduler(config);
  ASSERT_TRUE(scheduler.add_seq2seq(1, source_of(6), {0}, 4).ok());
  ASSERT_TRUE(scheduler.add_sibling(2, 1).ok());
  const Sequence* sibling = scheduler.find(2);
  ASSERT_NE(sibling, nullptr);
  EXPECT_EQ(sibling->source, source_of(6));
  EXPECT_EQ(sibling->tokens, (std::vector<std::int32_t>{0}));
  StepPlan plan = scheduler.plan_step();
  check_plan(scheduler, plan);
  ASSERT_EQ(plan.slices.size(), 2u);
  EXPECT_FALSE(plan.slices[1].encoder_tokens.empty());
  scheduler.remove(1);
  scheduler.remove(2);
  EXPECT_EQ(scheduler.pool().free_pages(), 64);
}

}  // namespace
}  // namespace weft::sched
