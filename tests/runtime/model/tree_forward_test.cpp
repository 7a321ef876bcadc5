// Token trees in the CPU forward pass (speculative verification, docs/speculative.md): each node
// of a flattened tree, attending to the context and its ancestors through the tree mask, gets
// the logits a plain causal run over context + its branch gives; two sequences with different
// trees run in one batch; a tree grown over two steps (a draft model's depth by depth) matches
// too; a chain as a tree equals the ordinary causal chunk bit for bit.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/thread_pool.hpp"
#include "loaders/model_loader.hpp"

namespace weft {
namespace {

using model::KvCache;
using model::SequenceSlice;
using model::StepBatch;

struct Tiny {
  LoadedModel loaded;
  int vocab = 0;
};

Tiny& tiny() {
  static Tiny t = [] {
    auto loaded = load_model(std::string(WEFT_SOURCE_DIR) + "/models/weft-tiny");
    if (!loaded) throw loaded.error();
    Tiny x{std::move(loaded.value()), 0};
    x.vocab = x.loaded.model.spec().vocab_size;
    return x;
  }();
  return t;
}

std::vector<std::int32_t> pages(KvCache& kv, int slots) {
  std::vector<std::int32_t> table;
  while (static_cast<int>(table.size()) < kv.pages_for(slots))
    table.push_back(*kv.allocate_page());
  return table;
}

// Logits of the last token of a causal run over `tokens` in fresh pages.
std::vector<float> causal_last(KvCache& kv, cpu::ThreadPool& pool,
                               const std::vector<std::int32_t>& tokens) {
  StepBatch b;
  b.tokens = tokens;
  for (int i = 0; i < static_cast<int>(tokens.size()); ++i)
    b.positions.push_back(i);
  auto table = pages(kv, static_cast<int>(tokens.size()));
  b.sequences.push_back({0, static_cast<int>(tokens.size()), table, false});
  std::vector<float> logits;
  EXPECT_TRUE(tiny().loaded.model.forward(b, kv, logits, pool));
  for (auto p : table)
    kv.release_page(p);
  return logits;
}

void expect_close(const float* got, const std::vector<float>& want, const std::string& what) {
  float max_ref = 0, max_err = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(want[i]));
    max_err = std::max(max_err, std::fabs(got[i] - want[i]));
  }
  EXPECT_LE(max_err, 1e-4f * max_ref) << what;
}

// A tree after the context: node parents (-1: the context's last token) and tokens.
struct Tree {
  std::vector<std::int32_t> parent, tokens;
  std::vector<std::int32_t> branch(int node, std::vector<std::int32_t> context) const {
    std::vector<std::int32_t> path;
    for (int a = node; a >= 0; a = parent[static_cast<std::size_t>(a)])
      path.push_back(tokens[static_cast<std::size_t>(a)]);
    context.insert(context.end(), path.rbegin(), path.rend());
    return context;
  }
  int depth(int node) const {
    int d = 0;
    for (int a = node; a >= 0; a = parent[static_cast<std::size_t>(a)])
      ++d;
    return d;
  }
};

TEST(TreeForward, EachNodeMatchesACausalRunOverItsBranchWithTwoSequencesBatched) {
  const model::Model& m = tiny().loaded.model;
  for (int page_size : {1, 4, 16}) {
    KvCache kv(m.kv_layout(page_size), 256);
    cpu::ThreadPool pool(2);
    const std::vector<std::int32_t> ctx_a = {5, 17, 300, 42, 7, 99, 1000, 3, 8, 12, 77};
    const std::vector<std::int32_t> ctx_b = {900, 4, 4, 61, 2000};
    // a: two branches from the root and one deeper fork; b: a chain of 2 and a sibling.
    const Tree ta{{-1, 0, 1, 0, -1, 4}, {11, 12, 13, 14, 15, 16}};
    const Tree tb{{-1, 0, -1}, {21, 22, 23}};
    // Context KV first (all but the last token, which the tree step computes as node 0 would
    // in the engine; here the context is computed whole and the tree hangs after it).
    auto table_a = pages(kv, static_cast<int>(ctx_a.size() + ta.tokens.size()));
    auto table_b = pages(kv, static_cast<int>(ctx_b.size() + tb.tokens.size()));
    {
      StepBatch b;
      for (auto [ctx, table] : {std::pair{&ctx_a, &table_a}, std::pair{&ctx_b, &table_b}}) {
        const int begin = static_cast<int>(b.tokens.size());
        for (int i = 0; i < static_cast<int>(ctx->size()); ++i) {
          b.tokens.push_back((*ctx)[static_cast<std::size_t>(i)]);
          b.positions.push_back(i);
        }
        b.sequences.push_back({begin, static_cast<int>(ctx->size()), *table, false});
      }
      std::vector<float> logits;
      ASSERT_TRUE(m.forward(b, kv, logits, pool));
    }
    StepBatch b;
    for (auto [tree, ctx, table] :
         {std::tuple{&ta, &ctx_a, &table_a}, std::tuple{&tb, &ctx_b, &table_b}}) {
      SequenceSlice s{static_cast<int>(b.tokens.size()), static_cast<int>(tree->tokens.size()),
                      *table, true};
      s.tree_parent = tree->parent;
      s.tree_first_slot = static_cast<int>(ctx->size());
      for (int j = 0; j < static_cast<int>(tree->tokens.size()); ++j) {
        b.tokens.push_back(tree->tokens[static_cast<std::size_t>(j)]);
        b.positions.push_back(static_cast<int>(ctx->size()) + tree->depth(j) - 1);
      }
      b.sequences.push_back(std::move(s));
    }
    std::vector<float> logits;
    ASSERT_TRUE(m.forward(b, kv, logits, pool));
    ASSERT_EQ(logits.size(), (ta.tokens.size() + tb.tokens.size()) * tiny().vocab);
    int row = 0;
    for (auto [tree, ctx] : {std::pair{&ta, &ctx_a}, std::pair{&tb, &ctx_b}}) {
      for (int j = 0; j < static_cast<int>(tree->tokens.size()); ++j, ++row) {
        const auto want = causal_last(kv, pool, tree->branch(j, *ctx));
        expect_close(logits.data() + static_cast<std::size_t>(row) * tiny().vocab, want,
                     "page size " + std::to_string(page_size) + ", node " + std::to_string(j));
      }
    }
  }
}

TEST(TreeForward, ATreeGrownOverTwoStepsMatchesToo) {
  // A draft model's use: depth 1 in one step, depth 2 in the next, attending to nodes written
  // by the step before.
  const model::Model& m = tiny().loaded.model;
  KvCache kv(m.kv_layout(4), 128);
  cpu::ThreadPool pool(2);
  const std::vector<std::int32_t> ctx = {5, 17, 300, 42, 7, 99};
  const Tree t{{-1, -1, 0, 1, 1}, {31, 32, 33, 34, 35}};
  auto table = pages(kv, static_cast<int>(ctx.size() + t.tokens.size()));
  {
    StepBatch b;
    b.tokens = ctx;
    for (int i = 0; i < static_cast<int>(ctx.size()); ++i)
      b.positions.push_back(i);
    b.sequences.push_back({0, static_cast<int>(ctx.size()), table, false});
    std::vector<float> logits;
    ASSERT_TRUE(m.forward(b, kv, logits, pool));
  }
  std::vector<float> rows;
  for (auto [from, to] : {std::pair{0, 2}, std::pair{2, 5}}) {
    StepBatch b;
    SequenceSlice s{0, to - from, table, true};
    s.tree_parent.assign(t.parent.begin(), t.parent.begin() + to);
    s.tree_first_slot = static_cast<int>(ctx.size());
    for (int j = from; j < to; ++j) {
      b.tokens.push_back(t.tokens[static_cast<std::size_t>(j)]);
      b.positions.push_back(static_cast<int>(ctx.size()) + t.depth(j) - 1);
    }
    b.sequences.push_back(std::move(s));
    std::vector<float> logits;
    ASSERT_TRUE(m.forward(b, kv, logits, pool));
    rows.insert(rows.end(), logits.begin(), logits.end());
  }
  for (int j = 0; j < 5; ++j) {
    expect_close(rows.data() + static_cast<std::size_t>(j) * tiny().vocab,
                 causal_last(kv, pool, t.branch(j, ctx)), "node " + std::to_string(j));
  }
}

TEST(TreeForward, AChainAsATreeEqualsTheCausalChunkBitForBit) {
  const model::Model& m = tiny().loaded.model;
  KvCache kv(m.kv_layout(16), 64);
  cpu::ThreadPool pool(1);
  const std::vector<std::int32_t> tokens = {5, 17, 300, 42, 7, 99, 1000, 3};
  std::vector<std::vector<float>> out;
  for (bool as_tree : {false, true}) {
    auto table = pages(kv, static_cast<int>(tokens.size()));
    StepBatch b;
    b.tokens = tokens;
    for (int i = 0; i < static_cast<int>(tokens.size()); ++i)
      b.positions.push_back(i);
    SequenceSlice s{0, static_cast<int>(tokens.size()), table, true};
    if (as_tree) {
      for (int i = 0; i < static_cast<int>(tokens.size()); ++i)
        s.tree_parent.push_back(i - 1);
    }
    b.sequences.push_back(std::move(s));
    std::vector<float> logits;
    ASSERT_TRUE(m.forward(b, kv, logits, pool));
    out.push_back(std::move(logits));
  }
  EXPECT_EQ(out[0], out[1]);
}

TEST(TreeForward, BadTreesAreRefusedWithTheReason) {
  const model::Model& m = tiny().loaded.model;
  KvCache kv(m.kv_layout(4), 8);
  cpu::ThreadPool pool(1);
  StepBatch b;
  b.tokens = {1, 2};
  b.positions = {0, 1};
  SequenceSlice s{0, 2, pages(kv, 4), true};
  s.tree_parent = {-1, 1};  // a node its own parent
  b.sequences.push_back(s);
  std::vector<float> logits;
  auto r = m.forward(b, kv, logits, pool);
  ASSERT_FALSE(r);
  EXPECT_NE(std::string(r.error().what()).find("parent"), std::string::npos) << r.error().what();
  b.sequences[0].tree_parent = {-1, 0};
  b.sequences[0].tree_first_slot = 3;  // slots 3 and 4 of a 4-slot table
  r = m.forward(b, kv, logits, pool);
  ASSERT_FALSE(r);
  EXPECT_NE(std::string(r.error().what()).find("does not fit"), std::string::npos)
      << r.error().what();
}

}  // namespace
}  // namespace weft
