// The scheduler's draft slices (docs/speculative.md) without a model: a fake target whose next
// token is a function of the position, speculators that propose right or wrong tokens as chains
// and trees. Checks the plan's shape (root then nodes, depth positions), what a verification
// commits (in-place accepted nodes computed, out-of-place ones recomputed as a chunk, never
// copied), scratch pages given back at once, the batch budget, and that every page returns.

#include <gtest/gtest.h>

#include <functional>

#include "runtime/scheduler/scheduler.hpp"

namespace weft::sched {
namespace {

std::int32_t truth(int position) {
  return static_cast<std::int32_t>(position * 31 % 97);
}

SchedulerConfig config(int pages = 64) {
  SchedulerConfig c;
  c.page_size = 4;
  c.num_pages = pages;
  c.max_tokens_per_step = 64;
  return c;
}

// Verification against the fake target, greedy: follow the children carrying the truth.
VerifiedDraft verify(const ScheduledSlice& slice) {
  VerifiedDraft v;
  const speculative::DraftTree& t = *slice.draft;
  int u = -1;
  int position = slice.root_position() + 1;
  for (;;) {
    int child = -1;
    for (int j = u + 1; j < t.size(); ++j)
      if (t.parent[static_cast<std::size_t>(j)] == u &&
          t.tokens[static_cast<std::size_t>(j)] == truth(position))
        child = j;
    v.tokens.push_back(truth(position));
    if (child < 0) return v;
    v.accepted.push_back(child);
    u = child;
    ++position;
  }
}

// Runs every sequence to completion; returns the outputs and checks the plan along the way.
std::vector<std::vector<std::int32_t>> run(Scheduler& s, int sequences, int prompt, int max_new,
                                           int* steps) {
  for (int i = 0; i < sequences; ++i) {
    std::vector<std::int32_t> p;
    for (int t = 0; t < prompt; ++t)
      p.push_back(truth(t));
    EXPECT_TRUE(s.add(static_cast<std::uint64_t>(i + 1), p, max_new).ok());
  }
  std::vector<std::vector<std::int32_t>> out(static_cast<std::size_t>(sequences));
  *steps = 0;
  while (s.running() + s.waiting() > 0) {
    StepPlan plan = s.plan_step();
    ++*steps;
    std::vector<std::int32_t> sampled;
    std::vector<VerifiedDraft> verified;
    for (const auto& slice : plan.slices) {
      if (slice.draft) {
        EXPECT_EQ(slice.token_count,
                  slice.root_position() - slice.first_position + 1 + slice.draft->size());
        EXPECT_GE(static_cast<int>(slice.page_table.size()) * 4,
                  slice.first_position + slice.token_count)
            << "scratch slots must be in the page table";
        verified.push_back(verify(slice));
      } else if (slice.samples) {
        sampled.push_back(truth(slice.first_position + slice.token_count));
      }
    }
    s.complete_step(plan, sampled, verified);
    for (const auto& slice : plan.slices) {
      const Sequence* seq = s.find(slice.id);
      if (seq == nullptr) continue;
      // Scratch pages past the tokens go back when the step completes.
      EXPECT_LE(static_cast<int>(seq->pages.size()),
                std::max(s.pool().pages_for(static_cast<int>(seq->tokens.size())), 1));
      if (seq->generated() >= max_new) {
        out[slice.id - 1].assign(seq->tokens.begin() + prompt, seq->tokens.end());
        s.remove(slice.id);
      }
    }
  }
  return out;
}

std::vector<std::int32_t> expected(int prompt, int max_new) {
  std::vector<std::int32_t> e;
  for (int p = prompt; p < prompt + max_new; ++p)
    e.push_back(truth(p));
  return e;
}

TEST(SpeculationScheduler, RightChainsFinishInFewerStepsWithTheSameOutput) {
  Scheduler s(config());
  SpeculationConfig spec;
  spec.max_depth = 4;
  spec.max_nodes = 4;
  spec.propose = [](const Sequence& seq, int nodes, int depth) {
    speculative::DraftTree t;
    const int n = static_cast<int>(seq.tokens.size());
    for (int k = 0; k < std::min(nodes, depth); ++k) {
      t.tokens.push_back(truth(n + k));
      t.parent.push_back(k - 1);
    }
    return t;
  };
  s.set_speculation(spec);
  int steps = 0;
  const auto out = run(s, 2, 6, 21, &steps);
  for (const auto& o : out)
    EXPECT_EQ(o, expected(6, 21));
  // One prefill step, then 5 tokens per step: 20 more tokens in 4 steps.
  EXPECT_EQ(steps, 5);
  EXPECT_EQ(s.pool().free_pages(), s.pool().num_pages()) << "pages leaked";
  EXPECT_EQ(s.speculation_stats().accepted_tokens, 2u * 16u);
}

TEST(SpeculationScheduler, AnOutOfPlaceAcceptedBranchIsRecomputedNotCopied) {
  Scheduler s(config());
  SpeculationConfig spec;
  spec.max_depth = 2;
  spec.max_nodes = 4;
  // The first chain is wrong; the second root child and its child are right: accepted nodes
  // sit in scratch slots 3 and 4 instead of 1 and 2. Only the first decode gets a tree.
  spec.propose = [](const Sequence& seq, int, int) {
    const int n = static_cast<int>(seq.tokens.size());
    speculative::DraftTree t;
    if (n != 4) return t;
    t.tokens = {truth(n) + 1, truth(n + 1), truth(n), truth(n + 1)};
    t.parent = {-1, 0, -1, 2};
    return t;
  };
  s.set_speculation(spec);
  std::vector<std::int32_t> prompt = {truth(0), truth(1), truth(2)};
  ASSERT_TRUE(s.add(1, prompt, 10).ok());
  StepPlan prefill = s.plan_step();
  s.complete_step(prefill, std::vector<std::int32_t>{truth(3)});
  StepPlan step = s.plan_step();
  ASSERT_EQ(step.slices.size(), 1u);
  ASSERT_TRUE(step.slices[0].draft);
  EXPECT_EQ(step.positions, (std::vector<std::int32_t>{3, 4, 5, 4, 5}));
  const VerifiedDraft v = verify(step.slices[0]);
  EXPECT_EQ(v.accepted, (std::vector<int>{2, 3}));
  s.complete_step(step, {}, std::vector<VerifiedDraft>{v});
  const Sequence* seq = s.find(1);
  EXPECT_EQ(seq->tokens.size(), 7u);  // 3 prompt + 1 + 2 accepted + 1 bonus
  EXPECT_EQ(seq->computed, 4) << "only the root is in place";
  // The next step computes the two accepted tokens and the bonus as one chunk (no tree is
  // proposed this time).
  StepPlan next = s.plan_step();
  ASSERT_EQ(next.slices.size(), 1u);
  EXPECT_FALSE(next.slices[0].draft);
  EXPECT_EQ(next.slices[0].token_count, 3);
  EXPECT_TRUE(next.slices[0].samples);
  // Generated tokens: decode rows, as plain decoding computed them (on the GPU a prefill tile
  // rounds otherwise, and greedy output would leave plain greedy output at a near-tie).
  EXPECT_TRUE(next.slices[0].decode_rows);
  EXPECT_FALSE(prefill.slices[0].decode_rows) << "a prompt is no catch-up";
  s.remove(1);
  EXPECT_EQ(s.pool().free_pages(), s.pool().num_pages());
}

// Only what a verification left is a catch-up: tokens a grammar forced (jump-forward) run as
// they run without speculation, a prefill chunk.
TEST(SpeculationScheduler, ForcedTokensAreNoCatchUp) {
  Scheduler s(config());
  SpeculationConfig spec;
  spec.propose = [](const Sequence&, int, int) { return speculative::DraftTree{}; };
  s.set_speculation(spec);
  ASSERT_TRUE(s.add(1, {truth(0), truth(1), truth(2)}, 10).ok());
  StepPlan prefill = s.plan_step();
  s.complete_step(prefill, std::vector<std::int32_t>{truth(3)});
  EXPECT_EQ(s.append_tokens(1, std::vector<std::int32_t>{truth(4), truth(5)}), 2);
  StepPlan next = s.plan_step();
  ASSERT_EQ(next.slices.size(), 1u);
  EXPECT_EQ(next.slices[0].token_count, 3);
  EXPECT_FALSE(next.slices[0].decode_rows);
  s.remove(1);
}

// With a tree at every step, the catch-up after an off-chain acceptance shares its slice with
// the next tree: the uncomputed tokens, the root, then the nodes (no step without speculation).
TEST(SpeculationScheduler, ACatchUpIsVerifiedWithTheNextTreeInOneSlice) {
  Scheduler s(config());
  SpeculationConfig spec;
  spec.max_depth = 2;
  spec.max_nodes = 4;
  spec.propose = [](const Sequence& seq, int, int) {
    const int n = static_cast<int>(seq.tokens.size());
    speculative::DraftTree t;
    t.tokens = {truth(n) + 1, truth(n + 1), truth(n), truth(n + 1)};
    t.parent = {-1, 0, -1, 2};
    return t;
  };
  std::vector<SpeculationTraceEvent> events;
  spec.trace = [&](const SpeculationTraceEvent& e) { events.push_back(e); };
  s.set_speculation(spec);
  ASSERT_TRUE(s.add(1, {truth(0), truth(1), truth(2)}, 10).ok());
  StepPlan prefill = s.plan_step();
  s.complete_step(prefill, std::vector<std::int32_t>{truth(3)});
  StepPlan step = s.plan_step();
  s.complete_step(step, {}, std::vector<VerifiedDraft>{verify(step.slices[0])});
  EXPECT_EQ(s.find(1)->computed, 4);
  EXPECT_EQ(s.find(1)->tokens.size(), 7u);
  StepPlan next = s.plan_step();
  ASSERT_EQ(next.slices.size(), 1u);
  const ScheduledSlice& slice = next.slices[0];
  ASSERT_TRUE(slice.draft);
  EXPECT_EQ(slice.first_position, 4);
  EXPECT_EQ(slice.root_position(), 6);
  EXPECT_EQ(slice.token_count, 7);
  EXPECT_EQ(next.positions, (std::vector<std::int32_t>{4, 5, 6, 7, 8, 7, 8}));
  EXPECT_EQ(next.tokens, (std::vector<std::int32_t>{truth(4), truth(5), truth(6), truth(7) + 1,
                                                    truth(8), truth(7), truth(8)}));
  EXPECT_GE(static_cast<int>(slice.page_table.size()) * 4, 7 + 4) << "scratch slots after 6";
  const VerifiedDraft v = verify(slice);
  EXPECT_EQ(v.accepted, (std::vector<int>{2, 3}));
  s.complete_step(next, {}, std::vector<VerifiedDraft>{v});
  EXPECT_EQ(s.find(1)->computed, 7) << "the catch-up and the root are in place";
  EXPECT_EQ(s.find(1)->tokens.size(), 10u);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].first_position, 4);
  EXPECT_EQ(events[1].catch_up, 2);
  EXPECT_EQ(events[1].accepted, (std::vector<int>{2, 3}));
  s.remove(1);
  EXPECT_EQ(s.pool().free_pages(), s.pool().num_pages());
  // End to end: every step after the first decode verifies a tree, and the output is right.
  Scheduler again(config());
  again.set_speculation(spec);
  int steps = 0;
  const auto out = run(again, 2, 3, 21, &steps);
  for (const auto& o : out)
    EXPECT_EQ(o, expected(3, 21));
  EXPECT_EQ(again.pool().free_pages(), again.pool().num_pages());
  // One prefill, then 3 tokens a step (19 tokens), then two plain decode steps (the tree is
  // deeper than what is left): 9 steps. A catch-up step of its own after each tree would take
  // 4 tokens every 2 steps: 12.
  EXPECT_EQ(steps, 9);
}

// What the trace (WEFT_SPEC_TRACE) records: the verification's tree, accepted path and commit,
// then the catch-up chunk's decode rows with the token it sampled.
TEST(SpeculationScheduler, TheTraceRecordsTreesAcceptedPathsAndCatchUps) {
  Scheduler s(config());
  SpeculationConfig spec;
  spec.max_depth = 2;
  spec.max_nodes = 4;
  spec.propose = [](const Sequence& seq, int, int) {
    const int n = static_cast<int>(seq.tokens.size());
    speculative::DraftTree t;
    if (n != 4) return t;
    t.tokens = {truth(n) + 1, truth(n + 1), truth(n), truth(n + 1)};
    t.parent = {-1, 0, -1, 2};
    return t;
  };
  std::vector<SpeculationTraceEvent> events;
  spec.trace = [&](const SpeculationTraceEvent& e) { events.push_back(e); };
  s.set_speculation(spec);
  ASSERT_TRUE(s.add(7, {truth(0), truth(1), truth(2)}, 10).ok());
  StepPlan prefill = s.plan_step();
  s.complete_step(prefill, std::vector<std::int32_t>{truth(3)});
  EXPECT_TRUE(events.empty()) << "a prompt's chunk is not traced";
  StepPlan step = s.plan_step();
  s.complete_step(step, {}, std::vector<VerifiedDraft>{verify(step.slices[0])});
  StepPlan next = s.plan_step();
  s.complete_step(next, std::vector<std::int32_t>{truth(7)});
  ASSERT_EQ(events.size(), 2u);
  const auto& v = events[0];
  EXPECT_TRUE(v.verification);
  EXPECT_EQ(v.step, step.step);
  EXPECT_EQ(v.sequence, 7u);
  EXPECT_EQ(v.prompt_len, 3);
  EXPECT_EQ(v.first_position, 3);
  EXPECT_EQ(v.tokens,
            (std::vector<std::int32_t>{truth(3), truth(4) + 1, truth(5), truth(4), truth(5)}));
  EXPECT_EQ(v.parent, (std::vector<std::int32_t>{-1, 0, -1, 2}));
  EXPECT_EQ(v.accepted, (std::vector<int>{2, 3}));
  EXPECT_EQ(v.appended, (std::vector<std::int32_t>{truth(4), truth(5), truth(6)}));
  EXPECT_EQ(v.computed, 4);
  const auto& c = events[1];
  EXPECT_FALSE(c.verification);
  EXPECT_EQ(c.first_position, 4);
  EXPECT_EQ(c.tokens, (std::vector<std::int32_t>{truth(4), truth(5), truth(6)}));
  EXPECT_EQ(c.appended, (std::vector<std::int32_t>{truth(7)}));
  EXPECT_EQ(c.computed, 7);
  EXPECT_EQ(to_json_line(v),
            "{\"step\":1,\"sequence\":7,\"prompt_len\":3,\"first_position\":3,\"catch_up\":0,"
            "\"kind\":"
            "\"verify\",\"tokens\":[" +
                std::to_string(truth(3)) + "," + std::to_string(truth(4) + 1) + "," +
                std::to_string(truth(5)) + "," + std::to_string(truth(4)) + "," +
                std::to_string(truth(5)) +
                "],\"parent\":[-1,0,-1,2],\"accepted\":[2,3],"
                "\"appended\":[" +
                std::to_string(truth(4)) + "," + std::to_string(truth(5)) + "," +
                std::to_string(truth(6)) + "],\"computed\":4}");
  s.remove(7);
}

// With an exact-row bound (the CUDA row kernel), a catch-up's decode rows count: the drafts
// shrink so that the step's decode rows stay within the bound.
TEST(SpeculationScheduler, CatchUpRowsCountAgainstTheExactRowLimit) {
  Scheduler s(config(256));
  SpeculationConfig spec;
  spec.max_depth = 4;
  spec.max_nodes = 4;
  spec.step_budget = 64;
  spec.max_step_rows = 16;
  // At its first decode, sequence 1's first chain is wrong and its second branch right (a
  // 3-token catch-up next); every other draft is a right chain.
  spec.propose = [](const Sequence& seq, int nodes, int depth) {
    const int n = static_cast<int>(seq.tokens.size());
    speculative::DraftTree t;
    if (seq.id == 1 && n == 4) {
      t.tokens = {truth(n) + 1, truth(n), truth(n + 1)};
      t.parent = {-1, -1, 1};
      return t;
    }
    for (int k = 0; k < std::min(nodes, depth); ++k) {
      t.tokens.push_back(truth(n + k));
      t.parent.push_back(k - 1);
    }
    return t;
  };
  s.set_speculation(spec);
  for (std::uint64_t id = 1; id <= 4; ++id)
    ASSERT_TRUE(s.add(id, {truth(0), truth(1), truth(2)}, 30).ok());
  StepPlan prefill = s.plan_step();
  s.complete_step(prefill, std::vector<std::int32_t>(4, truth(3)));
  StepPlan step = s.plan_step();
  ASSERT_EQ(step.slices.size(), 4u);
  std::vector<VerifiedDraft> verified;
  for (const auto& slice : step.slices) {
    ASSERT_TRUE(slice.draft);
    EXPECT_EQ(slice.draft->size(), 3) << "(16 - 4) / 4 draft tokens each";
    verified.push_back(verify(slice));
  }
  s.complete_step(step, {}, verified);
  // Four sequences with trees, sequence 1's after its catch-up's 2 rows before its root:
  // (16 - 4 - 2) / 4 = 2 draft tokens each (3 if the catch-up's rows were not counted: 18
  // decode rows).
  StepPlan next = s.plan_step();
  int rows = 0;
  for (const auto& slice : next.slices) {
    ASSERT_TRUE(slice.draft);
    EXPECT_EQ(slice.draft->size(), 2);
    EXPECT_EQ(slice.root_position() - slice.first_position, slice.id == 1 ? 2 : 0);
    rows += slice.token_count;
  }
  EXPECT_LE(rows, 16);
  for (std::uint64_t id = 1; id <= 4; ++id)
    s.remove(id);
  EXPECT_EQ(s.pool().free_pages(), s.pool().num_pages());
}

TEST(SpeculationScheduler, TheStepBudgetTurnsSpeculationDownThenOff) {
  for (auto [budget, want_nodes] : {std::pair{12, 4}, {6, 2}, {2, 0}}) {
    Scheduler s(config());
    SpeculationConfig spec;
    spec.max_depth = 4;
    spec.max_nodes = 4;
    spec.step_budget = budget;
    int asked = -1;
    spec.propose = [&](const Sequence& seq, int nodes, int depth) {
      asked = nodes;
      speculative::DraftTree t;
      for (int k = 0; k < std::min(nodes, depth); ++k) {
        t.tokens.push_back(truth(static_cast<int>(seq.tokens.size()) + k));
        t.parent.push_back(k - 1);
      }
      return t;
    };
    s.set_speculation(spec);
    for (std::uint64_t id = 1; id <= 3; ++id)
      ASSERT_TRUE(s.add(id, {1, 2, 3}, 20).ok());
    StepPlan prefill = s.plan_step();
    s.complete_step(prefill, std::vector<std::int32_t>{7, 7, 7});
    StepPlan step = s.plan_step();
    int drafted = 0;
    for (const auto& slice : step.slices)
      drafted += slice.draft ? slice.draft->size() : 0;
    EXPECT_EQ(drafted, 3 * want_nodes) << "budget " << budget;
    if (want_nodes == 0) EXPECT_EQ(asked, -1) << "the speculator is not even asked";
  }
}

// Issue #17's "no loss at batch 64": with the default step budget (32 draft tokens a step over
// all decoding sequences) each sequence's tree shrinks as the batch grows and from 33
// sequences the speculator is not even asked: those steps are plain decode steps.
TEST(SpeculationScheduler, TheDefaultBudgetTurnsSpeculationOffAtBatch64) {
  for (auto [sequences, want_nodes] :
       {std::pair{1, 4}, {8, 4}, {16, 2}, {32, 1}, {33, 0}, {64, 0}}) {
    SchedulerConfig c = config(1024);
    c.max_tokens_per_step = 4096;  // the draft budget binds, not the step's tokens
    Scheduler s(c);
    SpeculationConfig spec;  // the defaults: depth 4, 4 nodes, step budget 32
    int asked = 0;
    spec.propose = [&](const Sequence& seq, int nodes, int depth) {
      ++asked;
      speculative::DraftTree t;
      for (int k = 0; k < std::min(nodes, depth); ++k) {
        t.tokens.push_back(truth(static_cast<int>(seq.tokens.size()) + k));
        t.parent.push_back(k - 1);
      }
      return t;
    };
    s.set_speculation(spec);
    for (int id = 1; id <= sequences; ++id)
      ASSERT_TRUE(s.add(static_cast<std::uint64_t>(id), {1, 2, 3}, 20).ok());
    StepPlan prefill = s.plan_step();
    ASSERT_EQ(static_cast<int>(prefill.slices.size()), sequences);
    s.complete_step(prefill, std::vector<std::int32_t>(static_cast<std::size_t>(sequences), 7));
    StepPlan step = s.plan_step();
    int drafted = 0;
    for (const auto& slice : step.slices)
      drafted += slice.draft ? slice.draft->size() : 0;
    EXPECT_EQ(drafted, sequences * want_nodes) << sequences << " sequences";
    if (want_nodes == 0) {
      EXPECT_EQ(asked, 0) << sequences << " sequences: the speculator is not even asked";
      EXPECT_EQ(static_cast<int>(step.tokens.size()), sequences) << "a plain decode step";
    }
  }
}

// A backend whose verification rows are exact up to 16 rows a step (the CUDA row kernel):
// each of n sequences gets at most (16 - n) / n draft tokens.
TEST(SpeculationScheduler, TheExactRowLimitBoundsTheDraftTokens) {
  for (auto [sequences, want_nodes] : {std::pair{3, 4}, {4, 3}, {5, 2}, {8, 1}, {9, 0}}) {
    Scheduler s(config(256));
    SpeculationConfig spec;
    spec.max_depth = 4;
    spec.max_nodes = 4;
    spec.step_budget = 64;
    spec.max_step_rows = 16;
    spec.propose = [&](const Sequence& seq, int nodes, int depth) {
      speculative::DraftTree t;
      for (int k = 0; k < std::min(nodes, depth); ++k) {
        t.tokens.push_back(truth(static_cast<int>(seq.tokens.size()) + k));
        t.parent.push_back(k - 1);
      }
      return t;
    };
    s.set_speculation(spec);
    for (int id = 1; id <= sequences; ++id)
      ASSERT_TRUE(s.add(static_cast<std::uint64_t>(id), {1, 2, 3}, 20).ok());
    StepPlan prefill = s.plan_step();
    s.complete_step(prefill, std::vector<std::int32_t>(static_cast<std::size_t>(sequences), 7));
    StepPlan step = s.plan_step();
    int drafted = 0;
    for (const auto& slice : step.slices)
      drafted += slice.draft ? slice.draft->size() : 0;
    EXPECT_EQ(drafted, sequences * want_nodes) << sequences << " sequences";
    EXPECT_LE(static_cast<int>(step.tokens.size()), 16) << sequences << " sequences";
  }
}

TEST(SpeculationScheduler, NoScratchPagesWhenThePoolIsFullAndAllComeBackOnCancel) {
  // 3 pages of 4: a 5-token prompt with 4 new tokens needs all three, so a tree that wants a
  // fourth page gets none and the sequence decodes plainly.
  Scheduler s(config(3));
  SpeculationConfig spec;
  spec.max_depth = 4;
  spec.max_nodes = 4;
  spec.propose = [](const Sequence& seq, int nodes, int depth) {
    speculative::DraftTree t;
    for (int k = 0; k < std::min(nodes, depth); ++k) {
      t.tokens.push_back(truth(static_cast<int>(seq.tokens.size()) + k));
      t.parent.push_back(k - 1);
    }
    return t;
  };
  s.set_speculation(spec);
  ASSERT_TRUE(s.add(1, {1, 2, 3, 4, 5}, 7).ok());
  StepPlan prefill = s.plan_step();
  s.complete_step(prefill, std::vector<std::int32_t>{truth(5)});
  StepPlan step = s.plan_step();
  ASSERT_EQ(step.slices.size(), 1u);
  EXPECT_LE(static_cast<int>(step.slices[0].page_table.size()), 3);
  s.remove(1);  // cancelled while the step "runs"
  s.complete_step(step, {}, std::vector<VerifiedDraft>{VerifiedDraft{}});
  EXPECT_EQ(s.pool().free_pages(), 3);
}

}  // namespace
}  // namespace weft::sched
