#include "runtime/grammar/token_constraint.hpp"

#include <algorithm>
#include <string>
#include <string_view>

namespace weft::grammar {
namespace {

// Does a longer vocabulary token start with these bytes?
bool extendable(const TokenTrie& trie, std::string_view bytes) {
  std::uint32_t node = trie.root();
  for (char c : bytes) {
    const TokenTrie::Node& n = trie.node(node);
    std::uint32_t next = 0;
    for (std::uint32_t i = n.first_child; i < n.first_child + n.child_count; ++i) {
      if (trie.node(i).byte == static_cast<std::uint8_t>(c)) {
        next = i;
        break;
      }
    }
    if (next == 0) return false;  // the root is never a child
    node = next;
  }
  return trie.node(node).child_count > 0;
}

}  // namespace

TokenConstraint::TokenConstraint(std::shared_ptr<const CompiledGrammar> grammar, int logits_vocab)
    : matcher_(std::make_unique<GrammarMatcher>(grammar)),
      grammar_(std::move(grammar)),
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

TokenConstraint::Forced TokenConstraint::jump_forward(int max_tokens) {
  Forced out;
  if (max_tokens <= 0 || matcher_->is_terminated()) return out;
  const std::string forced = matcher_->find_jump_forward_string();
  if (forced.empty()) return out;
  const TokenTrie& trie = grammar_->trie();
  std::vector<std::int32_t> tokens;
  std::size_t pos = 0;
  while (pos < forced.size()) {
    const auto [id, len] = trie.longest_prefix(std::string_view(forced).substr(pos));
    // No token spells the next bytes (or none the logits row can hold): the rest is sampled.
    if (id < 0 || id >= vocab_ || len == 0) break;
    tokens.push_back(id);
    pos += len;
  }
  if (!tokens.empty() && pos == forced.size() &&
      extendable(trie, trie.vocab().tokens[static_cast<std::size_t>(tokens.back())])) {
    tokens.pop_back();
  }
  if (tokens.size() > static_cast<std::size_t>(max_tokens)) {
    tokens.resize(static_cast<std::size_t>(max_tokens));
  }
  for (std::int32_t t : tokens) {
    const Verdict v = accept(t);
    // Every prefix of the forced string is allowed, so a rejection is a matcher bug; the
    // state is unchanged by it and the tokens so far stand.
    if (v == Verdict::kRejected) break;
    out.tokens.push_back(t);
    out.verdict = v;
    if (v == Verdict::kComplete) break;
  }
  return out;
}

}  // namespace weft::grammar
