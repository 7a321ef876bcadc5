#include "runtime/grammar/token_constraint.hpp"

#include <algorithm>
#include <bit>

namespace weft::grammar {

TokenConstraint::TokenConstraint(std::shared_ptr<const CompiledGrammar> grammar, int logits_vocab)
    : grammar_(grammar),
      matcher_(std::make_unique<GrammarMatcher>(std::move(grammar))),
      vocab_(logits_vocab),
      mask_((static_cast<std::size_t>(std::max(logits_vocab, 0)) + 31) / 32, 0u) {}

const std::vector<std::uint32_t>& TokenConstraint::next_mask() {
  if (mask_valid_) return mask_;
  // The matcher writes min(its words, ours) and zeroes the rest of what it is given.
  matcher_->fill_next_token_bitmask(mask_);
  if (vocab_ % 32 != 0 && !mask_.empty()) {
    mask_.back() &= (1u << (vocab_ % 32)) - 1u;  // ids past the logits row cannot be drawn
  }
  mask_valid_ = true;
  return mask_;
}

TokenConstraint::Verdict TokenConstraint::accept(std::int32_t token) {
  if (!matcher_->accept_token(token)) return Verdict::kRejected;
  mask_valid_ = false;
  if (matcher_->is_terminated()) return Verdict::kComplete;
  if (!matcher_->can_terminate()) return Verdict::kContinue;
  // The grammar has matched: when nothing but end-of-sequence may follow, finish now rather
  // than spend a forward pass on drawing the eos. The mask is kept for the next step otherwise.
  const auto& mask = next_mask();
  std::size_t allowed = 0;
  for (std::uint32_t w : mask)
    allowed += static_cast<std::size_t>(std::popcount(w));
  for (std::int32_t eos : grammar_->trie().vocab().eos_ids) {
    if (eos >= 0 && eos < vocab_ && (mask[static_cast<std::size_t>(eos) / 32] >> (eos % 32) & 1u)) {
      --allowed;
    }
  }
  return allowed == 0 ? Verdict::kComplete : Verdict::kContinue;
}

}  // namespace weft::grammar
