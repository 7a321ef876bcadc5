#pragma once
// A speculator's proposal for one sequence: a tree of candidate tokens rooted at the
// sequence's last token (SpecInfer's token tree, seed 002). A linear chain is a tree of
// width 1.

#include <cstdint>
#include <vector>

namespace weft::speculative {

struct DraftTree {
  // Nodes in topological order (a parent before its children) with the first (most likely)
  // chain first: nodes 0, 1, ..., so that they sit at their final positions when the target
  // writes the tree's KV after the context, and an accepted prefix of it is never copied.
  std::vector<std::int32_t> tokens;
  std::vector<std::int32_t> parent;  // -1: a child of the sequence's last token
  // A sampled proposal (stochastic verification): q[u] is the draft's distribution (dense over
  // the vocabulary) at node u - 1 (u = 0: the sequence's last token), and draws[u] the tokens
  // drawn from it there, in draw order, repeats included; a drawn token need not have a node.
  // Both empty for a deterministic proposal (prompt lookup, top-k): a node's children then
  // count as one-hot drafts, in order.
  std::vector<std::vector<float>> q;
  std::vector<std::vector<std::int32_t>> draws;

  int size() const noexcept { return static_cast<int>(tokens.size()); }
  bool empty() const noexcept { return tokens.empty(); }
  bool sampled() const noexcept { return !q.empty(); }
  // A chain: every node the child of the one before (verified with plain causal attention).
  bool is_chain() const noexcept {
    for (std::size_t j = 0; j < parent.size(); ++j)
      if (parent[j] != static_cast<std::int32_t>(j) - 1) return false;
    return true;
  }
  int depth() const noexcept {
    std::vector<int> d(parent.size());
    int deepest = 0;
    for (std::size_t j = 0; j < parent.size(); ++j) {
      d[j] = parent[j] < 0 ? 1 : d[static_cast<std::size_t>(parent[j])] + 1;
      deepest = d[j] > deepest ? d[j] : deepest;
    }
    return deepest;
  }
};

}  // namespace weft::speculative
