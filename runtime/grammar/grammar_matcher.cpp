#include "runtime/grammar/grammar_matcher.hpp"

#include <algorithm>

namespace weft::grammar {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar,
                               std::size_t max_rollback_tokens)
    : grammar_(std::move(grammar)), max_rollback_(max_rollback_tokens), pda_(grammar_->g_, arena_) {
  StackSet start;
  pda_.start(start);
  if (start.overflow) fail(0);
  history_.push_back(commit(start));
  slot_epoch_.assign(grammar_->mask_count(), 0);
}

void GrammarMatcher::load(const State& s, StackSet& out) const {
  out.clear();
  for (NodeId n : s.tops)
    out.cursors.push_back(Cursor{n, 0, 0});
  out.accepted = s.accepted;
}

GrammarMatcher::State GrammarMatcher::commit(const StackSet& set) {
  State s;
  s.accepted = set.accepted;
  for (const Cursor& c : set.cursors) {
    NodeId n = c.base;
    for (std::uint32_t i = 0; i < c.len; ++i)
      n = arena_.intern(n, set.frames[c.begin + i]);
    s.tops.push_back(n);
  }
  std::sort(s.tops.begin(), s.tops.end());
  s.tops.erase(std::unique(s.tops.begin(), s.tops.end()), s.tops.end());
  return s;
}

void GrammarMatcher::fail(std::size_t at) {
  if (error_) return;
  error_ = Error(ErrorCode::kResourceExhausted,
                 "the grammar is too ambiguous: at byte " + std::to_string(at) +
                     " of the output it had more than " + std::to_string(kMaxLiveStacks) +
                     " ways to continue (the matcher's limit on live stacks), so the output is "
                     "refused");
}

// Runs `bytes` from `set` (replaced by the result); true when some stack survives or the
// grammar matched exactly at the last byte.
bool GrammarMatcher::run_bytes(StackSet& set, std::string_view bytes) {
  StackSet* cur = &set;
  StackSet* next = &b_;
  bool ok = true;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    pda_.step(*cur, static_cast<std::uint8_t>(bytes[i]), *next);
    std::swap(cur, next);
    if (cur->overflow) {
      fail(state().bytes + i + 1);
      ok = false;
      break;
    }
    // Matching the whole grammar before the last byte does not count: bytes remain.
    if (cur->empty() && (i + 1 < bytes.size() || !cur->accepted)) {
      ok = false;
      break;
    }
  }
  if (cur != &set) std::swap(set, *cur);
  return ok;
}

void GrammarMatcher::push_state(State s) {
  history_.push_back(std::move(s));
  while (history_.size() > max_rollback_ + 1)
    history_.pop_front();
}

void GrammarMatcher::fill_next_token_bitmask(std::span<std::uint32_t> words) {
  std::fill(words.begin(), words.end(), 0u);
  const State& s = state();
  if (terminated_) return;
  const auto only_eos = [&] {
    std::fill(words.begin(), words.end(), 0u);
    for (auto id : grammar_->trie().vocab().eos_ids)
      if (static_cast<std::size_t>(id >> 5) < words.size()) words[id >> 5] |= 1u << (id & 31);
  };
  if (error_) return only_eos();
  const auto& cg = *grammar_;
  const TokenTrie& trie = cg.trie();
  if (++epoch_ == 0) {
    std::fill(slot_epoch_.begin(), slot_epoch_.end(), 0u);
    epoch_ = 1;
  }
  seen_slots_.clear();
  for (NodeId n : s.tops) {
    auto ref = cg.mask_index(arena_, n);
    if (ref.bucket == CompiledGrammar::kNoBucket) {
      if (slot_epoch_[ref.index] == epoch_) continue;
      slot_epoch_[ref.index] = epoch_;
    } else if (std::any_of(seen_slots_.begin(), seen_slots_.end(), [&](const auto& r) {
                 return r.index == ref.index && r.bucket == ref.bucket;
               })) {
      continue;
    }
    seen_slots_.push_back(ref);
  }
  const std::size_t n_words = std::min(words.size(), bitmask_words());
  for (const auto& ref : seen_slots_) {
    const auto& m = cg.mask_at(ref);
    if (!m.accepted_bits.empty()) {
      const std::uint32_t* src = m.accepted_bits.data();
      std::uint32_t* dst = words.data();
      for (std::size_t i = 0; i < n_words; ++i)
        dst[i] |= src[i];
    } else {
      for (auto t : m.accepted_ids)
        words[t >> 5] |= 1u << (t & 31);
    }
  }
  // The stack-dependent tokens: one walk over the trie from the stacks at that position,
  // sharing the steps of common prefixes and skipping subtrees with none of them.
  if (levels_.empty()) levels_.resize(trie.max_token_bytes() + 2);
  // Their verdicts depend only on the full stacks, so they are looked up first by those.
  for (const auto& ref : seen_slots_) {
    const auto& m = cg.mask_at(ref);
    if (m.uncertain.empty()) continue;
    StackSet& start = levels_[0];
    start.clear();
    dependent_key_.assign({ref.index, ref.bucket});
    for (NodeId n : s.tops) {
      const auto other = cg.mask_index(arena_, n);
      if (other.index != ref.index || other.bucket != ref.bucket) continue;
      start.cursors.push_back(Cursor{n, 0, 0});
      NodeId p = n;
      for (; p > kContextNode; p = arena_[p].parent) {
        const Frame& f = arena_[p].frame;
        dependent_key_.insert(dependent_key_.end(), {f.rule, f.alt, f.pos, f.count, f.count_span});
      }
      dependent_key_.push_back(~p);  // the bottom, which also ends this stack in the key
    }
    dependent_tokens_.clear();
    if (!cg.find_dependent(dependent_key_, dependent_tokens_)) {
      check_uncertain(trie.root(), 0, m.uncertain);
      if (error_) return only_eos();
      cg.store_dependent(dependent_key_, dependent_tokens_);
    }
    for (auto t : dependent_tokens_)
      words[t >> 5] |= 1u << (t & 31);
  }
  for (auto [tok, owner] : trie.aliases())
    if (words[owner >> 5] >> (owner & 31) & 1) words[tok >> 5] |= 1u << (tok & 31);
  if (s.accepted)
    for (auto id : trie.vocab().eos_ids)
      words[id >> 5] |= 1u << (id & 31);
}

void GrammarMatcher::check_uncertain(std::uint32_t v, std::size_t depth,
                                     const std::vector<std::uint32_t>& ords) {
  const TokenTrie& trie = grammar_->trie();
  const auto& node = trie.node(v);
  for (std::uint32_t ci = 0; ci < node.child_count; ++ci) {
    std::uint32_t c = node.first_child + ci;
    const auto& child = trie.node(c);
    auto it = std::lower_bound(ords.begin(), ords.end(), child.subtree_begin);
    if (it == ords.end() || *it >= child.subtree_end) continue;
    StackSet& next = levels_[depth + 1];
    pda_.step(levels_[depth], child.byte, next);
    if (next.overflow) {
      fail(state().bytes + depth + 1);
      return;
    }
    if (child.token >= 0 && *it == child.subtree_begin && (!next.empty() || next.accepted))
      dependent_tokens_.push_back(child.token);
    if (!next.empty()) check_uncertain(c, depth + 1, ords);
    if (error_) return;
  }
}

bool GrammarMatcher::accept_token(std::int32_t token) {
  if (terminated_ || error_) return false;
  const TokenTrie& trie = grammar_->trie();
  if (token < 0 || static_cast<std::size_t>(token) >= trie.vocab_size()) return false;
  if (trie.is_eos(token)) {
    if (!state().accepted) return false;
    State s;
    s.terminated = true;
    s.bytes = state().bytes;
    push_state(std::move(s));
    terminated_ = true;
    return true;
  }
  if (trie.vocab().special[token]) return false;
  return accept_bytes(trie.vocab().tokens[token]);
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (terminated_ || error_ || bytes.empty()) return false;
  load(state(), a_);
  if (!run_bytes(a_, bytes)) return false;
  State s = commit(a_);
  s.bytes = state().bytes + bytes.size();
  push_state(std::move(s));
  return true;
}

Result<void> GrammarMatcher::rollback(std::size_t k) {
  if (k > history_.size() - 1)
    return Error(ErrorCode::kOutOfRange, "cannot roll back " + std::to_string(k) + " steps: only " +
                                             std::to_string(history_.size() - 1) + " are kept");
  for (std::size_t i = 0; i < k; ++i)
    history_.pop_back();
  terminated_ = state().terminated;
  return {};
}

std::string GrammarMatcher::find_jump_forward_string(std::size_t max_bytes) {
  std::string out;
  if (terminated_ || error_) return out;
  load(state(), a_);
  StackSet* cur = &a_;
  StackSet* next = &b_;
  while (out.size() < max_bytes && !cur->accepted && !cur->empty()) {
    ByteSet possible;
    for (const Cursor& c : cur->cursors)
      possible |= pda_.top_bytes(*cur, c);
    if (possible.count() != 1) break;
    std::uint8_t b = 0;
    while (!possible.test(b))
      ++b;
    pda_.step(*cur, b, *next);
    std::swap(cur, next);
    // The state past this byte is incomplete: stop here; accepting it reports the overflow.
    if (cur->overflow) break;
    out += static_cast<char>(b);
  }
  return out;
}

}  // namespace weft::grammar
