// The precomputation of one mask (CompiledGrammar::precompute): a walk over the vocabulary
// trie from a position, with its scratch's memo of stack-set transitions and the check that
// lets a JSON string's text subtrees be accepted whole.
#include <algorithm>
#include <bit>
#include <functional>

#include "runtime/grammar/grammar_matcher.hpp"

namespace weft::grammar {
namespace {

enum : std::uint8_t { kReject = 0, kAccept = 1, kUncertain = 2 };

}  // namespace

std::int32_t CompiledGrammar::Scratch::intern(const StackSet& s) {
  key.clear();
  auto put = [&](std::uint32_t x) { key.append(reinterpret_cast<const char*>(&x), sizeof x); };
  put(static_cast<std::uint32_t>(s.accepted) | static_cast<std::uint32_t>(s.left_context) << 1);
  for (const Cursor& c : s.cursors) {
    put(c.base);
    put(c.len);
    for (std::uint32_t i = 0; i < c.len; ++i) {
      const Frame& f = s.frames[c.begin + i];
      put(f.rule);
      put(f.alt);
      put(f.pos);
      put(f.count);
      put(f.count_span);
    }
  }
  if (auto it = index.find(key); it != index.end()) return it->second;
  if (states.size() >= kMaxStates) return -1;
  const auto id = static_cast<std::int32_t>(states.size());
  states.push_back(s);
  next.resize(next.size() + 256, -1);
  index.emplace(key, id);
  return id;
}

std::int32_t CompiledGrammar::Scratch::step(std::int32_t id, std::uint8_t byte) {
  const auto at = static_cast<std::size_t>(id) * 256 + byte;
  if (next[at] >= 0) return next[at];
  pda.step(states[static_cast<std::size_t>(id)], byte, stepped);
  if (stepped.overflow) return -1;  // incomplete: not a state
  const std::int32_t nid = intern(stepped);
  if (nid >= 0) next[at] = nid;
  return nid;
}

bool CompiledGrammar::Scratch::same_but_count(const StackSet& a, const StackSet& b,
                                              const FlatGrammar& g) {
  if (a.accepted != b.accepted || a.left_context != b.left_context ||
      a.cursors.size() != b.cursors.size())
    return false;
  bool counted = false;
  for (std::size_t i = 0; i < a.cursors.size(); ++i) {
    const Cursor &ca = a.cursors[i], &cb = b.cursors[i];
    if (ca.base != cb.base || ca.len != cb.len) return false;
    for (std::uint32_t k = 0; k < ca.len; ++k) {
      const Frame &fa = a.frames[ca.begin + k], &fb = b.frames[cb.begin + k];
      if (fa.rule != fb.rule || fa.alt != fb.alt || fa.pos != fb.pos) return false;
      if (fa.count == fb.count && fa.count_span == fb.count_span) continue;
      const Element& e = g.rules[fa.rule].alts[fa.alt][fa.pos];
      if (!e.counted() || fb.count != fa.count + 1 || fb.count_span != fa.count_span) return false;
      counted = true;
    }
  }
  return counted;
}

bool CompiledGrammar::Scratch::holds_string(std::int32_t id, StringClass klass,
                                            const FlatGrammar& g) {
  auto& known = klass == kStringUtf8 ? holds_utf8 : holds_ascii;
  if (known.size() <= static_cast<std::size_t>(id)) known.resize(states.size(), -1);
  if (known[static_cast<std::size_t>(id)] >= 0) return known[static_cast<std::size_t>(id)] == 1;
  // Breadth over (automaton state, memo id) pairs; a string's loop meets a handful (the
  // boundary and the continuation states of multi-byte characters).
  constexpr std::size_t kMaxPairs = 64;
  std::vector<std::pair<int, std::int32_t>> seen{{0, id}};
  auto same = [&](std::int32_t m) {
    return m == id || (m >= 0 && same_but_count(states[static_cast<std::size_t>(id)],
                                                states[static_cast<std::size_t>(m)], g));
  };
  bool ok = same(step(id, 'a'));
  for (std::size_t k = 0; k < seen.size() && ok; ++k) {
    const auto [q, m] = seen[k];
    for (int i = 0; i < 256 && ok; ++i) {
      const auto b = static_cast<std::uint8_t>(i);
      const int q2 = string_class_step(klass, q, b);
      if (q2 < 0) continue;
      const std::int32_t m2 = step(m, b);
      if (m2 < 0 || states[static_cast<std::size_t>(m2)].cursors.empty()) {
        ok = false;
        break;
      }
      // Back at a character boundary the set must be id again: a string's loop. Anything
      // else (a pattern's sets growing with each ':' of '.+:.+', a bounded string's copies)
      // is refused at its first such byte, so a failing check costs a step or two.
      if (q2 == 0) {
        if (!same(m2)) {
          ok = false;
          break;
        }
        continue;
      }
      const std::pair<int, std::int32_t> p{q2, m2};
      if (std::find(seen.begin(), seen.end(), p) != seen.end()) continue;
      if (seen.size() >= kMaxPairs) {
        ok = false;
        break;
      }
      seen.push_back(p);
    }
  }
  if (known.size() < states.size()) known.resize(states.size(), -1);
  known[static_cast<std::size_t>(id)] = ok ? 1 : 0;
  if (ok) {
    std::uint32_t h = 0xffffffffu;
    const StackSet& set = states[static_cast<std::size_t>(id)];
    for (const Frame& f : set.frames) {
      const Element& e = g.rules[f.rule].alts[f.alt][f.pos];
      if (e.counted() && e.max != kUnbounded) h = std::min(h, e.max - f.count_hi());
    }
    if (horizon.size() < states.size()) horizon.resize(states.size(), 0);
    horizon[static_cast<std::size_t>(id)] = h;
  }
  return ok;
}

// Walks the vocabulary trie from one position with an unknown stack below it. A token is
// accepted when some path consumes it without leaving the rule, or leaves the rule exactly at
// its last byte (the parent's continuation is always viable: every rule is productive). It is
// uncertain when a path leaves the rule with bytes to spare and the next byte can follow the
// rule somewhere; otherwise it is rejected everywhere.
void CompiledGrammar::precompute(std::uint32_t rule, std::uint32_t alt, std::uint32_t pos,
                                 const StaticContext& ctx, PositionMask& out, Scratch& scratch,
                                 const PositionMask* ref, std::size_t skip_len) const {
  const TokenTrie& trie = *trie_;
  Pushdown& pda = scratch.pda;
  auto& levels = scratch.levels;
  auto& kind = scratch.kind;
  const ByteSet& follow = g_.follow[ctx.bottom_rule];
  std::vector<std::int32_t> touched;
  levels[0].clear();
  levels[0].frames = ctx.frames;
  levels[0].frames.push_back(Frame{rule, alt, pos});
  levels[0].cursors.push_back(
      Cursor{ctx.bottom, 0, static_cast<std::uint32_t>(levels[0].frames.size())});

  if (scratch.states.size() >= Scratch::kMaxStates) scratch.clear_memo();
  auto& states = scratch.states;
  auto& next_id = scratch.next;
  // `id`: the memo id of the set at depth d (then levels[d] is unused), or -1 when the memo
  // is full and the set lives in levels[d].
  std::function<void(std::uint32_t, std::size_t, bool, std::int32_t)> walk =
      [&](std::uint32_t v, std::size_t d, bool uncertain, std::int32_t id) {
        const auto& node = trie.node(v);
        const StackSet& cur = id >= 0 ? states[static_cast<std::size_t>(id)] : levels[d];
        // Inside a free JSON string, the subtrees of string text (most of the vocabulary) are
        // accepted whole: the walk would find every token of them alive.
        std::uint8_t whole = 0;
        std::size_t horizon = 0;
        // A string's loop set is met within one character of the position (a UTF-8 character
        // is at most 4 bytes); deeper sets of it are the same id, already known.
        if (id >= 0 && node.child_count > 0 && d <= 4) {
          if (scratch.holds_string(id, kStringUtf8, g_))
            whole = kStringUtf8;
          else if (scratch.holds_string(id, kStringAscii, g_))
            whole = kStringAscii;
          if (whole) horizon = scratch.horizon[static_cast<std::size_t>(id)];
        }
        for (std::uint32_t ci = 0; ci < node.child_count; ++ci) {
          std::uint32_t c = node.first_child + ci;
          const auto& child = trie.node(c);
          // Only tokens longer than skip_len are decided here (ref has the others).
          if (trie.deepest(c) <= skip_len) continue;
          if ((whole & trie.string_classes(c)) && trie.deepest(c) - d <= horizon) {
            for (std::uint32_t i = child.subtree_begin; i < child.subtree_end; ++i) {
              const std::int32_t t = trie.order()[i];
              if (skip_len != 0 &&
                  trie.vocab().tokens[static_cast<std::size_t>(t)].size() <= skip_len)
                continue;
              kind[t] = kAccept;
              touched.push_back(t);
            }
            continue;
          }
          bool uncertain_here = uncertain || (cur.left_context && follow.test(child.byte));
          std::int32_t nid = -1;
          const StackSet* next = nullptr;
          if (id >= 0) nid = next_id[static_cast<std::size_t>(id) * 256 + child.byte];
          if (nid >= 0) {
            next = &states[static_cast<std::size_t>(nid)];
          } else {
            StackSet& stepped = levels[d + 1];
            if (cur.empty()) {
              stepped.clear();
            } else {
              pda.step(cur, child.byte, stepped);
            }
            if (stepped.overflow) {
              // Too many stacks to follow from here (kMaxLiveStacks): the real stacks decide
              // every token below, and the matcher refuses the output if they overflow too.
              for (std::uint32_t i = child.subtree_begin; i < child.subtree_end; ++i) {
                const std::int32_t t = trie.order()[i];
                if (trie.vocab().tokens[static_cast<std::size_t>(t)].size() <= skip_len) continue;
                kind[t] = kUncertain;
                touched.push_back(t);
              }
              continue;
            }
            next = &stepped;
            if (id >= 0) {
              nid = scratch.intern(stepped);
              if (nid >= 0) {
                next_id[static_cast<std::size_t>(id) * 256 + child.byte] = nid;
                next = &states[static_cast<std::size_t>(nid)];
              }
            }
          }
          bool alive = !next->empty() || next->left_context || next->accepted;
          if (child.token >= 0 && d + 1 > skip_len) {
            std::uint8_t k = alive ? kAccept : (uncertain_here ? kUncertain : kReject);
            if (k != kReject) {
              kind[child.token] = k;
              touched.push_back(child.token);
            }
          }
          if (alive) {
            walk(c, d + 1, uncertain_here, nid);
          } else if (uncertain_here) {
            for (std::uint32_t i = child.subtree_begin + (child.token >= 0 ? 1 : 0);
                 i < child.subtree_end; ++i) {
              const std::int32_t t = trie.order()[i];
              if (trie.vocab().tokens[static_cast<std::size_t>(t)].size() <= skip_len) continue;
              kind[t] = kUncertain;
              touched.push_back(t);
            }
          }
        }
      };
  walk(trie.root(), 0, false, scratch.intern(levels[0]));
  if (ref != nullptr) {
    // The short tokens' verdicts: those of the outermost copy.
    auto short_token = [&](std::int32_t t) {
      return trie.vocab().tokens[static_cast<std::size_t>(t)].size() <= skip_len;
    };
    if (!ref->accepted_bits.empty()) {
      for (std::size_t w = 0; w < ref->accepted_bits.size(); ++w)
        for (std::uint32_t bits = ref->accepted_bits[w]; bits != 0; bits &= bits - 1) {
          const auto t =
              static_cast<std::int32_t>(w * 32 + static_cast<std::size_t>(std::countr_zero(bits)));
          if (short_token(t)) {
            kind[t] = kAccept;
            touched.push_back(t);
          }
        }
    } else {
      for (auto t : ref->accepted_ids)
        if (short_token(t)) {
          kind[t] = kAccept;
          touched.push_back(t);
        }
    }
    for (auto ord : ref->uncertain) {
      const std::int32_t t = trie.order()[ord];
      if (short_token(t)) {
        kind[t] = kUncertain;
        touched.push_back(t);
      }
    }
  }

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
      out.uncertain.push_back(static_cast<std::uint32_t>(trie.order_index(t)));
    }
    kind[t] = kReject;
  }
  std::sort(out.accepted_ids.begin(), out.accepted_ids.end());
  std::sort(out.uncertain.begin(), out.uncertain.end());
}

}  // namespace weft::grammar
