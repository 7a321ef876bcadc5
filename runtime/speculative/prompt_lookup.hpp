#pragma once
// N-gram prompt lookup (Saxena 2023, "prompt lookup decoding"; vLLM's ngram speculator): the
// last n tokens of the sequence are looked up earlier in its own prompt and output, and the
// tokens that followed a match are proposed. No model; it shines where the output copies the
// input (summaries, code edits, extraction). With a width > 1 the continuations of several
// matches (most recent first) are merged into a tree.

#include "runtime/speculative/speculator.hpp"

namespace weft::speculative {

struct PromptLookupConfig {
  int max_ngram = 3;  // try suffixes of this length first, down to min_ngram
  int min_ngram = 1;
};

class PromptLookup final : public Speculator {
 public:
  explicit PromptLookup(PromptLookupConfig config = {}) : config_(config) {}
  DraftTree propose(std::uint64_t sequence, std::span<const std::int32_t> tokens,
                    const ProposalLimits& limits) override;
  void forget(std::uint64_t) override {}

 private:
  PromptLookupConfig config_;
};

}  // namespace weft::speculative
