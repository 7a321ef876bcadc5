#pragma once
// One sequence under a grammar, in the step loop's terms: the bitmask its next token is
// sampled under, and what a sampled token means for the request. The constraint actor holds
// one per constrained sequence; `weft generate` holds one directly.

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/grammar/grammar_matcher.hpp"

namespace weft::grammar {

class TokenConstraint {
 public:
  enum class Verdict {
    kContinue,  // the output goes on
    kComplete,  // the grammar has matched and allows nothing more (or an eos was accepted):
                // the request finishes with `stop` without drawing an eos
    kRejected,  // the grammar does not allow this token (state unchanged)
  };

  // `logits_vocab`: the width of the model's logits rows, which the mask covers (it may differ
  // from the tokenizer's vocabulary; ids outside the trie are never allowed).
  TokenConstraint(std::shared_ptr<const CompiledGrammar> grammar, int logits_vocab);

  // The allowed next tokens, ceil(logits_vocab / 32) words, bit i % 32 of word i / 32 for
  // token i. Computed on the first call after the state changed, then reused.
  const std::vector<std::uint32_t>& next_mask();
  bool mask_ready() const { return mask_valid_; }

  Verdict accept(std::int32_t token);
  bool is_terminated() const { return matcher_->is_terminated(); }

 private:
  // On the heap: the matcher's pushdown automaton refers to the matcher's own arena, so the
  // matcher must not move while this class does.
  std::unique_ptr<GrammarMatcher> matcher_;
  int vocab_;
  std::vector<std::uint32_t> mask_;
  bool mask_valid_ = false;
};

}  // namespace weft::grammar
