#pragma once
// Verification of a token tree against the target model's distributions.
//
// Greedy: follow the tree while a node's child carries the target's argmax; the argmax at the
// first node without one is the bonus token. The output is exactly plain greedy decoding.
//
// Stochastic: SpecInfer's multi-step speculative sampling (seed 002, Miao et al. 2024,
// "SpecInfer", section 4.2), which keeps the output distributed exactly as the target's. At
// node u with target distribution p, the draws made at u are tried in draw order: a draw x
// (from the draft's q, or a one-hot q for a deterministic proposal) is accepted with
// probability min(1, p(x) / q(x)); on rejection p becomes the residual norm(max(0, p - q)).
// An accepted x with a node descends to it; one without (a draw the width budget left out)
// ends the walk with x. When every draw is rejected, or u has none, a token sampled from p
// (the residual) ends the walk. Each trial is a speculative sampling step towards the current
// residual with a draw independent of the earlier ones, so by induction the token leaving u
// is distributed as the target's p at u (Leviathan et al. 2023, Theorem 1; SpecInfer Thm 4.2).

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "runtime/speculative/draft_tree.hpp"

namespace weft::speculative {

// Uniform doubles in [0, 1), one per call.
using Uniform = std::function<double()>;

// One node's trials. `p` (dense over the vocabulary, summing to 1) becomes the residual;
// `q` is the draft distribution the draws came from, or empty for one-hot drafts. Returns
// the index of the accepted draw, or -1 and the token drawn from the final residual.
struct NodeVerdict {
  int accepted_draw = -1;
  std::int32_t token = -1;
};
NodeVerdict verify_node(std::vector<double>& p, std::span<const std::int32_t> draws,
                        std::span<const float> q, const Uniform& uniform);

// A token drawn from `p` by inverse CDF (the last token of positive probability when
// rounding leaves u beyond the total).
std::int32_t sample_from(std::span<const double> p, double u);

struct TreeVerdict {
  std::vector<int> accepted;  // tree nodes on the accepted path, root first
  std::int32_t bonus = -1;    // the token after them, drawn from the target
  // The output: the accepted nodes' tokens, then the bonus token.
  std::vector<std::int32_t> tokens(const DraftTree& tree) const;
};

// Greedy verification: target(u) is the target's argmax at node u - 1 (u = 0: the root).
TreeVerdict verify_greedy(const DraftTree& tree, const std::function<std::int32_t(int)>& target);

// Stochastic verification: target(u) is the target's distribution at node u - 1, dense over
// the vocabulary, summing to 1 (it is modified).
TreeVerdict verify_stochastic(const DraftTree& tree,
                              const std::function<std::vector<double>(int)>& target,
                              const Uniform& uniform);

}  // namespace weft::speculative
