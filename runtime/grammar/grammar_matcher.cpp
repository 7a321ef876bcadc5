#include "runtime/grammar/grammar_matcher.hpp"

#include <algorithm>
#include <functional>

namespace weft::grammar {
namespace {

enum : std::uint8_t { kReject = 0, kAccept = 1, kUncertain = 2 };

}  // namespace

Result<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::compile(
    const Grammar& grammar, std::shared_ptr<const TokenTrie> trie, const CompileLimits& limits) {
  if (!trie)
    return Error(ErrorCode::kInvalidArgument, "no vocabulary given to compile the grammar for");
  auto flat = flatten_grammar(grammar, limits);
  if (!flat) return flat.error();
  auto cg = std::shared_ptr<CompiledGrammar>(new CompiledGrammar());
  cg->g_ = std::move(*flat);
  cg->trie_ = std::move(trie);
  const auto& g = cg->g_;
  std::uint32_t slots = 0;
  for (const auto& rule : g.rules) {
    cg->rule_base_.push_back(static_cast<std::uint32_t>(cg->alt_base_.size()));
    for (const auto& seq : rule.alts) {
      cg->alt_base_.push_back(slots);
      slots += static_cast<std::uint32_t>(seq.size());
    }
  }
  cg->slot_mask_.assign(slots, -1);
  Pushdown pda(g, cg->sentinels_);
  std::vector<StackSet> levels(cg->trie_->max_token_bytes() + 2);
  std::vector<std::uint8_t> kind(cg->trie_->vocab_size(), kReject);
  for (std::uint32_t r = 0; r < g.rules.size(); ++r)
    for (std::uint32_t a = 0; a < g.rules[r].alts.size(); ++a)
      for (std::uint32_t p = 0; p < g.rules[r].alts[a].size(); ++p) {
        if (g.rules[r].alts[a][p].is_rule) continue;
        cg->slot_mask_[cg->slot(Frame{r, a, p})] = static_cast<std::int32_t>(cg->masks_.size());
        cg->masks_.emplace_back();
        cg->precompute(r, a, p, cg->masks_.back(), pda, levels, kind);
      }
  return std::shared_ptr<const CompiledGrammar>(std::move(cg));
}

std::size_t CompiledGrammar::uncertain_count() const {
  std::size_t n = 0;
  for (const auto& m : masks_)
    n += m.uncertain.size();
  return n;
}

// Walks the vocabulary trie from one position with an unknown stack below it. A token is
// accepted when some path consumes it without leaving the rule, or leaves the rule exactly at
// its last byte (the parent's continuation is always viable: every rule is productive). It is
// uncertain when a path leaves the rule with bytes to spare and the next byte can follow the
// rule somewhere; otherwise it is rejected everywhere.
void CompiledGrammar::precompute(std::uint32_t rule, std::uint32_t alt, std::uint32_t pos,
                                 PositionMask& out, Pushdown& pda, std::vector<StackSet>& levels,
                                 std::vector<std::uint8_t>& kind) const {
  const TokenTrie& trie = *trie_;
  const ByteSet& follow = g_.follow[rule];
  std::vector<std::int32_t> touched;
  levels[0].clear();
  levels[0].frames.push_back(Frame{rule, alt, pos});
  levels[0].cursors.push_back(Cursor{kContextNode, 0, 1});

  std::function<void(std::uint32_t, std::size_t, bool)> walk = [&](std::uint32_t v, std::size_t d,
                                                                   bool uncertain) {
    const auto& node = trie.node(v);
    for (std::uint32_t ci = 0; ci < node.child_count; ++ci) {
      std::uint32_t c = node.first_child + ci;
      const auto& child = trie.node(c);
      const StackSet& cur = levels[d];
      bool uncertain_here = uncertain || (cur.left_context && follow.test(child.byte));
      StackSet& next = levels[d + 1];
      if (cur.empty()) {
        next.clear();
      } else {
        pda.step(cur, child.byte, next);
      }
      bool alive = !next.empty() || next.left_context;
      if (child.token >= 0) {
        std::uint8_t k = alive ? kAccept : (uncertain_here ? kUncertain : kReject);
        if (k != kReject) {
          kind[child.token] = k;
          touched.push_back(child.token);
        }
      }
      if (alive) {
        walk(c, d + 1, uncertain_here);
      } else if (uncertain_here) {
        for (std::uint32_t i = child.subtree_begin + (child.token >= 0 ? 1 : 0);
             i < child.subtree_end; ++i) {
          kind[trie.order()[i]] = kUncertain;
          touched.push_back(trie.order()[i]);
        }
      }
    }
  };
  walk(trie.root(), 0, false);

  std::size_t accepted = 0;
  for (auto t : touched)
    accepted += kind[t] == kAccept;
  const std::size_t words = (trie.vocab_size() + 31) / 32;
  const bool use_bits = accepted > words;
  if (use_bits) out.accepted_bits.assign(words, 0);
  for (auto t : touched) {
    if (kind[t] == kAccept) {
      if (use_bits)
        out.accepted_bits[t >> 5] |= 1u << (t & 31);
      else
        out.accepted_ids.push_back(t);
    } else if (kind[t] == kUncertain) {
      out.uncertain.push_back(t);
    }
    kind[t] = kReject;
  }
  // Trie order keeps the runtime checks walking the vocabulary in a cache-friendly order.
  std::sort(out.accepted_ids.begin(), out.accepted_ids.end());
  std::sort(out.uncertain.begin(), out.uncertain.end());
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar,
                               std::size_t max_rollback_tokens)
    : grammar_(std::move(grammar)), max_rollback_(max_rollback_tokens), pda_(grammar_->g_, arena_) {
  StackSet start;
  pda_.start(start);
  history_.push_back(commit(start));
  slot_epoch_.assign(grammar_->masks_.size(), 0);
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

// Runs `bytes` from `set` (replaced by the result); true when some stack survives or the
// grammar matched exactly at the last byte.
bool GrammarMatcher::run_bytes(StackSet& set, std::string_view bytes) {
  StackSet* cur = &set;
  StackSet* next = &b_;
  bool ok = true;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    pda_.step(*cur, static_cast<std::uint8_t>(bytes[i]), *next);
    std::swap(cur, next);
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
  const auto& cg = *grammar_;
  const TokenTrie& trie = cg.trie();
  if (++epoch_ == 0) {
    std::fill(slot_epoch_.begin(), slot_epoch_.end(), 0u);
    epoch_ = 1;
  }
  seen_slots_.clear();
  for (NodeId n : s.tops) {
    auto mi = static_cast<std::uint32_t>(cg.slot_mask_[cg.slot(arena_[n].frame)]);
    if (slot_epoch_[mi] != epoch_) {
      slot_epoch_[mi] = epoch_;
      seen_slots_.push_back(mi);
    }
  }
  const std::size_t n_words = std::min(words.size(), bitmask_words());
  for (auto mi : seen_slots_) {
    const auto& m = cg.masks_[mi];
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
  // The stack-dependent tokens: run each from the stacks at that position only.
  StackSet start;
  for (auto mi : seen_slots_) {
    const auto& m = cg.masks_[mi];
    if (m.uncertain.empty()) continue;
    start.clear();
    for (NodeId n : s.tops)
      if (static_cast<std::uint32_t>(cg.slot_mask_[cg.slot(arena_[n].frame)]) == mi)
        start.cursors.push_back(Cursor{n, 0, 0});
    for (auto t : m.uncertain) {
      if (words[t >> 5] >> (t & 31) & 1) continue;
      a_ = start;
      if (run_bytes(a_, trie.vocab().tokens[t])) words[t >> 5] |= 1u << (t & 31);
    }
  }
  for (auto [tok, owner] : trie.aliases())
    if (words[owner >> 5] >> (owner & 31) & 1) words[tok >> 5] |= 1u << (tok & 31);
  if (s.accepted)
    for (auto id : trie.vocab().eos_ids)
      words[id >> 5] |= 1u << (id & 31);
}

bool GrammarMatcher::accept_token(std::int32_t token) {
  if (terminated_) return false;
  const TokenTrie& trie = grammar_->trie();
  if (token < 0 || static_cast<std::size_t>(token) >= trie.vocab_size()) return false;
  if (trie.is_eos(token)) {
    if (!state().accepted) return false;
    State s;
    s.terminated = true;
    push_state(std::move(s));
    terminated_ = true;
    return true;
  }
  if (trie.vocab().special[token]) return false;
  return accept_bytes(trie.vocab().tokens[token]);
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (terminated_ || bytes.empty()) return false;
  load(state(), a_);
  if (!run_bytes(a_, bytes)) return false;
  push_state(commit(a_));
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
  if (terminated_) return out;
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
    out += static_cast<char>(b);
  }
  return out;
}

}  // namespace weft::grammar
