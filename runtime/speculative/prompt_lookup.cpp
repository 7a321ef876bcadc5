#include "runtime/speculative/prompt_lookup.hpp"

#include <algorithm>

namespace weft::speculative {

DraftTree PromptLookup::propose(std::uint64_t, std::span<const std::int32_t> tokens,
                                const ProposalLimits& limits) {
  DraftTree tree;
  const int n = static_cast<int>(tokens.size());
  const int depth = std::min(limits.max_depth, limits.max_nodes);
  const int width = std::max(1, limits.width);
  if (depth <= 0 || n < 2) return tree;
  // Continuations, most recent match first, from the longest suffix n-gram that matches.
  std::vector<std::vector<std::int32_t>> continuations;
  for (int g = std::min(config_.max_ngram, n - 1); g >= config_.min_ngram; --g) {
    const auto suffix = tokens.subspan(static_cast<std::size_t>(n - g));
    for (int start = n - g - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
      const int from = start + g;
      const int len = std::min(depth, n - from);
      std::vector<std::int32_t> c(tokens.begin() + from, tokens.begin() + from + len);
      if (std::find(continuations.begin(), continuations.end(), c) == continuations.end()) {
        continuations.push_back(std::move(c));
      }
      if (static_cast<int>(continuations.size()) >= width) break;
    }
    if (!continuations.empty()) break;
  }
  // Merge into a trie, parents before children: the first (most recent) continuation is the
  // first chain, nodes 0, 1, ...
  for (const auto& c : continuations) {
    int node = -1;  // the current node: -1 is the sequence's last token
    std::size_t i = 0;
    // Follow what is already there (a prefix shared with an earlier continuation).
    for (; i < c.size(); ++i) {
      int found = -1;
      for (int j = node + 1; j < tree.size(); ++j) {
        if (tree.parent[static_cast<std::size_t>(j)] == node &&
            tree.tokens[static_cast<std::size_t>(j)] == c[i]) {
          found = j;
          break;
        }
      }
      if (found < 0) break;
      node = found;
    }
    // The rest is a new branch, appended after every earlier node.
    for (; i < c.size() && tree.size() < limits.max_nodes; ++i) {
      tree.tokens.push_back(c[i]);
      tree.parent.push_back(node);
      node = tree.size() - 1;
    }
  }
  return tree;
}

}  // namespace weft::speculative
