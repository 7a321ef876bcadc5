#include "runtime/speculative/prompt_lookup.hpp"

#include <gtest/gtest.h>

namespace weft::speculative {
namespace {

ProposalLimits limits(int nodes, int depth, int width = 1) {
  ProposalLimits l;
  l.max_nodes = nodes;
  l.max_depth = depth;
  l.width = width;
  return l;
}

TEST(PromptLookup, ProposesWhatFollowedTheLongestMatchingSuffix) {
  PromptLookup lookup;
  // ... 1 2 3 [4 5 6 7] ... 9 1 2 3 -> 4 5 6 (depth 3)
  const std::vector<std::int32_t> tokens = {8, 1, 2, 3, 4, 5, 6, 7, 9, 1, 2, 3};
  const DraftTree t = lookup.propose(0, tokens, limits(3, 3));
  EXPECT_EQ(t.tokens, (std::vector<std::int32_t>{4, 5, 6}));
  EXPECT_TRUE(t.is_chain());
  EXPECT_FALSE(t.sampled());
}

TEST(PromptLookup, NothingWithoutAMatchAndNeverPastTheLimits) {
  PromptLookup lookup;
  const std::vector<std::int32_t> fresh = {1, 2, 3, 4};
  EXPECT_TRUE(lookup.propose(0, fresh, limits(4, 4)).empty());
  const std::vector<std::int32_t> tokens = {1, 2, 3, 4, 5, 1, 2};
  EXPECT_EQ(lookup.propose(0, tokens, limits(1, 4)).tokens, (std::vector<std::int32_t>{3}));
  EXPECT_TRUE(lookup.propose(0, tokens, limits(4, 0)).empty());
}

TEST(PromptLookup, AWidthMergesSeveralContinuationsIntoATreeMostRecentFirst) {
  PromptLookup lookup;
  // "0 1" was followed by 2 3, later by 2 4, later by 5 6; the sequence ends with 0 1.
  const std::vector<std::int32_t> tokens = {0, 1, 2, 3, 0, 1, 2, 4, 0, 1, 5, 6, 0, 1};
  const DraftTree t = lookup.propose(0, tokens, limits(8, 2, 3));
  // Most recent first: 5 6 is the first chain, then 2 4, then 3 under the shared 2.
  EXPECT_EQ(t.tokens, (std::vector<std::int32_t>{5, 6, 2, 4, 3}));
  EXPECT_EQ(t.parent, (std::vector<std::int32_t>{-1, 0, -1, 2, 2}));
  EXPECT_FALSE(t.is_chain());
  EXPECT_EQ(t.depth(), 2);
}

}  // namespace
}  // namespace weft::speculative
