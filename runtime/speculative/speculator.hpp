#pragma once
// What proposes candidate tokens for a sequence: n-gram prompt lookup (no model) or a draft
// model (docs/speculative.md). Called on the scheduler's strand while a step is planned.

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/speculative/draft_tree.hpp"

namespace weft::speculative {

struct ProposalLimits {
  int max_nodes = 0;  // tokens the tree may hold (the step's budget for this sequence)
  int max_depth = 0;  // and its depth (never past the sequence's remaining output)
  int width = 1;      // the frontier's width at each depth (1: a chain)
  // Stochastic verification wants a sampled tree (DraftTree::q, draws) at this temperature;
  // 0: greedy verification, a deterministic tree.
  float temperature = 0.0f;
  std::uint64_t seed = 0;  // for a sampled tree's draws
};

// One sequence's share of a step's proposals (Speculator::propose_batch).
struct ProposalRequest {
  std::uint64_t sequence = 0;
  std::span<const std::int32_t> tokens;  // the sequence's prompt and output so far
  ProposalLimits limits;
};

class Speculator {
 public:
  virtual ~Speculator() = default;
  // A tree rooted at the last of `tokens` (the sequence's prompt and output so far), within
  // `limits`; an empty tree proposes nothing (the sequence decodes one token).
  virtual DraftTree propose(std::uint64_t sequence, std::span<const std::int32_t> tokens,
                            const ProposalLimits& limits) = 0;
  // Every decoding sequence of a step at once, one tree per request in order. A draft model
  // runs one forward pass per depth for all of them (DraftModel); the default proposes one
  // sequence after the other.
  virtual std::vector<DraftTree> propose_batch(std::span<const ProposalRequest> requests) {
    std::vector<DraftTree> trees;
    trees.reserve(requests.size());
    for (const auto& r : requests)
      trees.push_back(propose(r.sequence, r.tokens, r.limits));
    return trees;
  }
  // The sequence ended: drop whatever is kept for it.
  virtual void forget(std::uint64_t sequence) = 0;
};

}  // namespace weft::speculative
