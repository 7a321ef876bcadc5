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
  // Why the output was refused whatever the token (GrammarMatcher::error): kRejected then
  // reports this rather than a token the mask should not have allowed. Null otherwise.
  const Error* error() const { return matcher_->error(); }

  // Jump-forward decoding: where the grammar now admits exactly one continuation, the tokens
  // that spell it (at most max_tokens), already accepted, and the verdict after the last.
  // The bytes are split greedily into the longest vocabulary tokens (the tokenizer's own
  // merges are not replayed), so the forced tokens' bytes are exactly a prefix of the forced
  // string. Boundary rule: when the split reaches the end of the string, its last token is
  // held back if a longer token starts with its bytes, so the next draw may still pick a
  // token that runs from the forced text into the free text after it.
  struct Forced {
    std::vector<std::int32_t> tokens;
    Verdict verdict = Verdict::kContinue;
  };
  Forced jump_forward(int max_tokens);

 private:
  // On the heap: the matcher's pushdown automaton refers to the matcher's own arena, so the
  // matcher must not move while this class does.
  std::unique_ptr<GrammarMatcher> matcher_;
  std::shared_ptr<const CompiledGrammar> grammar_;  // for its vocabulary trie
  int vocab_;
  std::vector<std::uint32_t> mask_;
  bool mask_valid_ = false;
};

}  // namespace weft::grammar
