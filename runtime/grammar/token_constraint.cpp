#include "runtime/grammar/token_constraint.hpp"

#include <algorithm>

namespace weft::grammar {

TokenConstraint::TokenConstraint(std::shared_ptr<const CompiledGrammar> grammar, int logits_vocab)
    : matcher_(std::make_unique<GrammarMatcher>(std::move(grammar))),
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
  // The grammar has matched, and no stack is left to continue it: nothing but end-of-sequence
  // may follow, so finish now rather than spend a forward pass on drawing the eos. (A stack
  // left whose continuation no token can start is caught one step later: its mask allows only
  // the eos.) Deciding this costs no mask: the next one is still computed under the forward
  // pass.
  return matcher_->can_terminate() && matcher_->stack_count() == 0 ? Verdict::kComplete
                                                                   : Verdict::kContinue;
}

}  // namespace weft::grammar
