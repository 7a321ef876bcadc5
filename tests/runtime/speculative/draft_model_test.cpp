// The draft model as speculator on the CPU (runtime/speculative/draft_model.hpp), with
// models/weft-tiny-draft: a step's proposals made together (one forward pass per depth for
// every sequence) are the proposals made one at a time; the accepted part of a proposal's first
// chain is not computed again; pages all return; a pool too small proposes nothing.

#include "runtime/speculative/draft_model.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "loaders/model_loader.hpp"

namespace weft::speculative {
namespace {

std::string draft_dir() {
  const char* env = std::getenv("WEFT_TEST_SOURCE_DIR");
  const std::filesystem::path source = env != nullptr && *env != '\0' ? env : WEFT_SOURCE_DIR;
  return (source / "models/weft-tiny-draft").string();
}

class DraftModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto loaded = load_model(draft_dir());
    ASSERT_TRUE(loaded) << loaded.error().what();
    loaded_ = new LoadedModel(std::move(loaded.value()));
  }
  static void TearDownTestSuite() { delete loaded_; }

  static DraftModel make(int pages = 64) { return DraftModel(loaded_->model, pages, 16, 2); }

  // A deterministic token sequence of `n` ids (weft-tiny's vocabulary is 8192).
  static std::vector<std::int32_t> tokens(int n, std::uint32_t seed) {
    std::vector<std::int32_t> t;
    std::uint32_t x = seed * 2654435761u + 1;
    for (int i = 0; i < n; ++i) {
      x = x * 1664525u + 1013904223u;
      t.push_back(static_cast<std::int32_t>((x >> 8) % 8000) + 100);
    }
    return t;
  }

  static ProposalLimits limits(int depth, int width) {
    ProposalLimits l;
    l.max_depth = depth;
    l.max_nodes = depth * width;
    l.width = width;
    return l;
  }

  static LoadedModel* loaded_;
};
LoadedModel* DraftModelTest::loaded_ = nullptr;

TEST_F(DraftModelTest, ABatchOfProposalsIsTheProposalsOneAtATime) {
  for (int width : {1, 2}) {
    // Prompts of different lengths: one needs a catch-up pass (longer than the inline limit).
    const std::vector<std::vector<std::int32_t>> seqs = {tokens(5, 1), tokens(40, 2), tokens(1, 3)};
    DraftModel alone = make();
    std::vector<DraftTree> one_by_one;
    for (std::size_t i = 0; i < seqs.size(); ++i)
      one_by_one.push_back(alone.propose(i, seqs[i], limits(4, width)));

    DraftModel batched = make();
    std::vector<ProposalRequest> requests;
    for (std::size_t i = 0; i < seqs.size(); ++i)
      requests.push_back({i, seqs[i], limits(4, width)});
    const std::uint64_t before = batched.forward_passes();
    const auto trees = batched.propose_batch(requests);
    ASSERT_EQ(trees.size(), seqs.size());
    // One catch-up pass (the 40-token prompt), the first pass, then one per further depth:
    // the same count as a single sequence's, whatever the batch.
    EXPECT_EQ(batched.forward_passes() - before, 1u + 4u) << "width " << width;
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      EXPECT_EQ(trees[i].tokens, one_by_one[i].tokens) << "width " << width << " sequence " << i;
      EXPECT_EQ(trees[i].parent, one_by_one[i].parent) << "width " << width << " sequence " << i;
      EXPECT_EQ(trees[i].depth(), 4);
      EXPECT_EQ(trees[i].size(), 4 * width);
      EXPECT_EQ(trees[i].is_chain(), width == 1);
    }
  }
}

TEST_F(DraftModelTest, TheAcceptedFirstChainIsNotComputedAgain) {
  std::vector<std::int32_t> seq = tokens(12, 7);
  DraftModel draft = make();
  const DraftTree first = draft.propose(1, seq, limits(4, 1));
  ASSERT_EQ(first.size(), 4);
  // The target accepted two draft tokens and added its own.
  seq.push_back(first.tokens[0]);
  seq.push_back(first.tokens[1]);
  seq.push_back(first.tokens[1] == 4321 ? 4322 : 4321);
  const std::uint64_t tokens_before = draft.forward_tokens();
  const DraftTree second = draft.propose(1, seq, limits(4, 1));
  EXPECT_EQ(draft.reused_tokens(), 2u);
  // Only the new token, then one token a depth.
  EXPECT_EQ(draft.forward_tokens() - tokens_before, 4u);
  // What a fresh draft proposes from the same tokens.
  DraftModel fresh = make();
  EXPECT_EQ(second.tokens, fresh.propose(1, seq, limits(4, 1)).tokens);
  EXPECT_EQ(fresh.reused_tokens(), 0u);

  // A rejected chain: the sequence went on with another token, which the draft computes.
  seq.push_back(second.tokens[0] == 17 ? 18 : 17);
  const DraftTree third = draft.propose(1, seq, limits(4, 1));
  EXPECT_EQ(draft.reused_tokens(), 2u);
  DraftModel fresh2 = make();
  EXPECT_EQ(third.tokens, fresh2.propose(1, seq, limits(4, 1)).tokens);
}

TEST_F(DraftModelTest, PagesReturnAndASmallPoolProposesNothing) {
  DraftModel draft = make(8);
  const int all = draft.free_pages();
  EXPECT_EQ(all, 8);
  std::vector<ProposalRequest> requests;
  const auto a = tokens(20, 4), b = tokens(30, 5);
  requests.push_back({10, a, limits(4, 2)});
  requests.push_back({11, b, limits(4, 2)});
  const auto trees = draft.propose_batch(requests);
  EXPECT_FALSE(trees[0].empty());
  EXPECT_FALSE(trees[1].empty());
  EXPECT_LT(draft.free_pages(), all);
  // 200 tokens do not fit in what is left: no proposal, nothing breaks.
  const auto c = tokens(200, 6);
  EXPECT_TRUE(draft.propose(12, c, limits(4, 1)).empty());
  draft.forget(10);
  draft.forget(11);
  draft.forget(12);
  draft.forget(99);  // never seen
  EXPECT_EQ(draft.free_pages(), all);
  // Nothing to propose from or for.
  EXPECT_TRUE(draft.propose(13, std::span<const std::int32_t>(), limits(4, 1)).empty());
  EXPECT_TRUE(draft.propose(13, a, limits(0, 1)).empty());
  draft.forget(13);
  EXPECT_EQ(draft.free_pages(), all);
}

TEST_F(DraftModelTest, SampledTreesCarryTheirDistributions) {
  DraftModel draft = make();
  const auto seq = tokens(10, 8);
  ProposalLimits l = limits(3, 2);
  l.temperature = 0.8f;
  l.seed = 42;
  const DraftTree t = draft.propose(3, seq, l);
  ASSERT_FALSE(t.empty());
  ASSERT_TRUE(t.sampled());
  ASSERT_EQ(t.q.size(), static_cast<std::size_t>(t.size()) + 1);
  EXPECT_EQ(t.q[0].size(), 8192u);
  EXPECT_FALSE(t.draws[0].empty());
  // Each node's token was drawn at its parent.
  for (int j = 0; j < t.size(); ++j) {
    const auto& draws =
        t.draws[static_cast<std::size_t>(t.parent[static_cast<std::size_t>(j)] + 1)];
    EXPECT_NE(std::find(draws.begin(), draws.end(), t.tokens[static_cast<std::size_t>(j)]),
              draws.end());
  }
}

// A CPU backend that runs greedy chains "on its device" (ForwardBackend::greedy_chain) the way
// the CUDA model does, a step per depth with each slice's argmax fed to the next, so that the
// draft's chain path (its pages, its nodes, what it keeps for the next proposal) runs here.
class ChainBackend final : public model::ForwardBackend {
 public:
  ChainBackend(const model::Model& m, int pages) : cpu_(m, m.kv_layout(16), pages, 2) {}
  const model::ModelSpec& spec() const noexcept override { return cpu_.spec(); }
  int num_pages() const noexcept override { return cpu_.num_pages(); }
  bool supports_token_trees() const noexcept override { return cpu_.supports_token_trees(); }
  Result<void> forward(const model::StepBatch& batch, std::vector<float>& logits) override {
    return cpu_.forward(batch, logits);
  }
  bool runs_greedy_chains() const noexcept override { return true; }
  Result<void> greedy_chain(const model::StepBatch& first, int steps,
                            std::vector<std::int32_t>& tokens) override {
    ++chains;
    const int S = static_cast<int>(first.sequences.size());
    const int V = spec().vocab_size;
    tokens.assign(static_cast<std::size_t>(steps * S), -1);
    model::StepBatch batch = first;
    std::vector<float> logits;
    for (int d = 0; d < steps; ++d) {
      if (auto ok = cpu_.forward(batch, logits); !ok) return ok;
      model::StepBatch next;
      for (int s = 0; s < S; ++s) {
        const float* row = logits.data() + static_cast<std::size_t>(s) * V;
        const auto id = static_cast<std::int32_t>(std::max_element(row, row + V) - row);
        tokens[static_cast<std::size_t>(d * S + s)] = id;
        const auto& slice = batch.sequences[static_cast<std::size_t>(s)];
        next.tokens.push_back(id);
        next.positions.push_back(
            batch.positions[static_cast<std::size_t>(slice.token_begin + slice.token_count - 1)] +
            1);
        next.sequences.push_back({s, 1, slice.page_table});
      }
      batch = std::move(next);
    }
    return {};
  }
  int chains = 0;

 private:
  model::CpuForwardBackend cpu_;
};

TEST_F(DraftModelTest, ChainsInOneGoAreTheChainsDepthByDepth) {
  auto backend = std::make_unique<ChainBackend>(loaded_->model, 64);
  ChainBackend* chain_backend = backend.get();
  DraftModel chains(std::move(backend), 16);
  DraftModel steps = make();
  std::vector<std::vector<std::int32_t>> seqs = {tokens(5, 11), tokens(30, 12), tokens(2, 13)};
  for (int round = 0; round < 3; ++round) {
    std::vector<ProposalRequest> requests;
    for (std::size_t i = 0; i < seqs.size(); ++i)
      requests.push_back({i, seqs[i], limits(static_cast<int>(2 + i), 1)});  // depths 2, 3, 4
    const auto a = chains.propose_batch(requests);
    const auto b = steps.propose_batch(requests);
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      EXPECT_EQ(a[i].tokens, b[i].tokens) << "round " << round << " sequence " << i;
      EXPECT_EQ(a[i].parent, b[i].parent) << "round " << round << " sequence " << i;
      ASSERT_EQ(a[i].size(), static_cast<int>(2 + i));
      // The target accepts the first draft token and adds one of its own.
      seqs[i].push_back(a[i].tokens[0]);
      seqs[i].push_back(a[i].tokens[0] == 77 ? 78 : 77);
    }
  }
  EXPECT_EQ(chain_backend->chains, 3);
  EXPECT_EQ(chains.reused_tokens(), steps.reused_tokens());
  EXPECT_EQ(chains.reused_tokens(), 6u);  // one token a sequence after each of two rounds
  for (std::uint64_t id : {0, 1, 2})
    chains.forget(id);
  EXPECT_EQ(chains.free_pages(), 64);
}

}  // namespace
}  // namespace weft::speculative
