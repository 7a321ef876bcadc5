#include "runtime/grammar/grammar_compiler.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

namespace weft::grammar {
namespace {

using Seq = std::vector<Element>;

// A rule repeated a bounded number of times is inlined into each copy when it is this small.
constexpr std::size_t kMaxInlineAlts = 32;
constexpr std::size_t kMaxInlineElements = 96;

class Flattener {
 public:
  Flattener(const Grammar& g, const CompileLimits& limits) : g_(g), limits_(limits) {}

  Result<FlatGrammar> run() {
    out_.rules.resize(g_.rule_count());
    for (RuleId r = 0; r < g_.rule_count(); ++r)
      out_.rules[r].name = g_.rule(r).name;
    for (RuleId r = 0; r < g_.rule_count(); ++r) {
      if (!g_.rule(r).body)
        return Error(ErrorCode::kInvalidArgument,
                     "grammar rule '" + g_.rule(r).name + "' is referenced but never defined");
      current_ = g_.rule(r).name;
      current_rule_ = r;
      auto alts = lower(*g_.rule(r).body);
      if (!alts) return alts.error();
      out_.rules[r].alts = std::move(*alts);
    }
    out_.root = g_.root();
    out_.repeat_outer.assign(out_.rules.size(), FlatGrammar::kNoRule);
    out_.repeat_left.assign(out_.rules.size(), 0);
    for (const auto& [rule, outer, left] : chains_) {
      out_.repeat_outer[rule] = outer;
      out_.repeat_left[rule] = left;
    }
    return std::move(out_);
  }

 private:
  Result<std::vector<Seq>> lower(ExprId id) {
    if (out_.rules.size() > limits_.max_rules)
      return Error(ErrorCode::kResourceExhausted, "grammar too large: more than " +
                                                      std::to_string(limits_.max_rules) +
                                                      " rules after expanding repetitions");
    const Expr& e = g_.expr(id);
    switch (e.kind) {
      case Expr::Kind::kBytes:
        return std::vector<Seq>{{Element{false, set_index(e.bytes)}}};
      case Expr::Kind::kRule:
        return std::vector<Seq>{{Element{true, e.rule}}};
      case Expr::Kind::kSequence: {
        Seq seq;
        for (ExprId c : e.children) {
          auto part = lower(c);
          if (!part) return part.error();
          if (part->size() == 1) {
            seq.insert(seq.end(), (*part)[0].begin(), (*part)[0].end());
          } else {
            seq.push_back(Element{true, helper(std::move(*part))});
          }
        }
        return std::vector<Seq>{std::move(seq)};
      }
      case Expr::Kind::kChoice: {
        std::vector<Seq> alts;
        for (ExprId c : e.children) {
          auto part = lower(c);
          if (!part) return part.error();
          for (auto& s : *part)
            alts.push_back(std::move(s));
        }
        return alts;
      }
      case Expr::Kind::kRepeat:
        return lower_repeat(e);
    }
    return Error(ErrorCode::kInternal, "unknown grammar expression kind");
  }

  Result<std::vector<Seq>> lower_repeat(const Expr& e) {
    if (e.max != kUnbounded && e.min > e.max)
      return Error(ErrorCode::kInvalidArgument,
                   "repetition {" + std::to_string(e.min) + "," + std::to_string(e.max) +
                       "} in rule '" + current_ + "' has its minimum above its maximum");
    std::uint64_t copies = e.max == kUnbounded ? e.min + 1ull : e.max;
    if (limits_.counted_above != 0 && copies > limits_.counted_above && consumes(e.children[0]))
      return lower_counted(e);
    if (copies > limits_.max_repeat_expansion)
      return Error(ErrorCode::kResourceExhausted,
                   "repetition bound " + std::to_string(copies) + " in rule '" + current_ +
                       "' exceeds the limit of " + std::to_string(limits_.max_repeat_expansion));
    auto item = lower(e.children[0]);
    if (!item) return item.error();
    Element x = item->size() == 1 && (*item)[0].size() == 1
                    ? (*item)[0][0]
                    : Element{true, helper(std::move(*item))};
    // The optional copies below each get their own masks (one per place x is used from, see
    // CompiledGrammar): when x is a rule, every position of it is precomputed once per copy,
    // with the whole vocabulary walked through x's closure each time. Inlining a small rule's
    // alternatives into each copy instead (O_k ::= a1 O_{k-1} | a2 O_{k-1} | ... | "", the same
    // language) leaves each copy one position per alternative, most of which only a few tokens
    // can start: a JSON string with maxLength 40 over a 128K vocabulary compiles in well under
    // a second instead of seconds.
    std::vector<Seq> inlined;
    std::optional<ExprId> inline_body;
    // Rules the inlined lowering of each copy created (its helpers): [first, second).
    std::pair<std::uint32_t, std::uint32_t> first_helpers{0, 0};
    std::vector<std::pair<std::uint32_t, std::uint32_t>> copy_helpers;
    // A rule is not inlined into itself (item ::= ... item{1,3} ...): its expansion would
    // never end.
    if (x.is_rule && e.max != kUnbounded && e.max - e.min >= 2 && x.index < g_.rule_count() &&
        x.index != current_rule_ &&
        std::find(inlining_.begin(), inlining_.end(), x.index) == inlining_.end()) {
      if (auto body = g_.rule(x.index).body; body) {
        inlining_.push_back(x.index);
        first_helpers.first = static_cast<std::uint32_t>(out_.rules.size());
        auto alts = lower(*body);
        first_helpers.second = static_cast<std::uint32_t>(out_.rules.size());
        inlining_.pop_back();
        if (!alts) return alts.error();
        std::size_t elements = 0;
        for (const auto& a : *alts)
          elements += a.size();
        if (alts->size() <= kMaxInlineAlts && elements <= kMaxInlineElements) {
          inlined = std::move(*alts);
          inline_body = *body;
        }
      }
    }
    Seq seq(e.min, x);
    if (e.max == kUnbounded) {
      // H ::= x H | ""
      std::uint32_t h = new_rule();
      out_.rules[h].alts = {Seq{x, Element{true, h}}, Seq{}};
      seq.push_back(Element{true, h});
    } else if (e.max > e.min) {
      // O_k ::= x O_{k-1} | "" nests the optional tail, so the stack stays flat (tail calls)
      // and the grammar stays linear in the bound.
      // Each copy lowers the inlined body afresh, so the helper rules inside it (a UTF-8
      // sequence, an escape) belong to that copy alone and are precomputed in its context
      // too, rather than shared by every copy.
      auto copy = [&](std::optional<std::uint32_t> next) -> Result<std::vector<Seq>> {
        std::vector<Seq> alts;
        if (!inline_body) {
          alts.push_back(Seq{x});
        } else if (!next) {
          alts = inlined;  // the first copy uses the lowering made above
        } else {
          inlining_.push_back(x.index);
          const auto begin = static_cast<std::uint32_t>(out_.rules.size());
          auto again = lower(*inline_body);
          copy_helpers.push_back({begin, static_cast<std::uint32_t>(out_.rules.size())});
          inlining_.pop_back();
          if (!again) return again.error();
          alts = std::move(*again);
        }
        if (next) {
          for (auto& a : alts)
            a.push_back(Element{true, *next});
        }
        alts.push_back(Seq{});
        return alts;
      };
      std::uint32_t prev = new_rule();
      auto first = copy(std::nullopt);
      if (!first) return first.error();
      out_.rules[prev].alts = std::move(*first);
      std::vector<std::uint32_t> chain{prev};
      for (std::uint32_t k = 1; k < e.max - e.min; ++k) {
        auto alts = copy(prev);
        if (!alts) return alts.error();
        std::uint32_t r = new_rule();
        out_.rules[r].alts = std::move(*alts);
        prev = r;
        chain.push_back(r);
      }
      // Every copy consumes a byte when each alternative of x holds a byte element (rule
      // elements might match nothing): then the copies' masks can share work.
      bool consumes = inlined.empty() ? !x.is_rule : true;
      for (const auto& a : inlined)
        consumes = consumes &&
                   std::any_of(a.begin(), a.end(), [](const Element& el) { return !el.is_rule; });
      if (consumes && chain.size() > 1) {
        // Helpers inside a copy are matched the same way: from inside one, finishing the item
        // takes a byte, so a token of at most k bytes still fits the k copies left. Helpers
        // that are themselves copies of a nested repetition keep that chain's reuse.
        std::set<std::uint32_t> nested;
        for (const auto& c : chains_) {
          nested.insert(c.rule);
          nested.insert(c.outer);
        }
        for (std::size_t j = 0; j < chain.size(); ++j)
          chains_.push_back({chain[j], chain.back(), static_cast<std::uint32_t>(j + 1)});
        if (inline_body) {
          copy_helpers.insert(copy_helpers.begin(), first_helpers);
          const auto& outer = copy_helpers.back();
          for (std::size_t j = 0; j + 1 < copy_helpers.size(); ++j) {
            const auto& mine = copy_helpers[j];
            if (mine.second - mine.first != outer.second - outer.first) continue;
            for (std::uint32_t i = 0; i < mine.second - mine.first; ++i) {
              if (nested.count(mine.first + i) || nested.count(outer.first + i)) continue;
              chains_.push_back(
                  {mine.first + i, outer.first + i, static_cast<std::uint32_t>(j + 1)});
            }
          }
        }
      }
      seq.push_back(Element{true, prev});
    }
    return std::vector<Seq>{std::move(seq)};
  }

  // x{m,n} as one counted element over a rule of x's own: x's alternatives when x is a small
  // rule (so its positions sit on this element alone and are precomputed with its count, see
  // CompiledGrammar), otherwise x itself.
  Result<std::vector<Seq>> lower_counted(const Expr& e) {
    const std::uint64_t bound = e.max == kUnbounded ? e.min : e.max;
    if (bound > limits_.max_counted_repeat)
      return Error(ErrorCode::kResourceExhausted,
                   "repetition bound " + std::to_string(bound) + " in rule '" + current_ +
                       "' exceeds the limit of " + std::to_string(limits_.max_counted_repeat));
    const Expr& item_expr = g_.expr(e.children[0]);
    std::uint32_t rule = 0;
    if (item_expr.kind == Expr::Kind::kRule && item_expr.rule != current_rule_ &&
        std::find(inlining_.begin(), inlining_.end(), item_expr.rule) == inlining_.end() &&
        g_.rule(item_expr.rule).body) {
      inlining_.push_back(item_expr.rule);
      auto alts = lower(*g_.rule(item_expr.rule).body);
      inlining_.pop_back();
      if (!alts) return alts.error();
      std::size_t elements = 0;
      for (const auto& a : *alts)
        elements += a.size();
      rule = alts->size() <= kMaxInlineAlts && elements <= kMaxInlineElements
                 ? helper(std::move(*alts))
                 : item_expr.rule;
    } else {
      auto alts = lower(e.children[0]);
      if (!alts) return alts.error();
      rule = helper(std::move(*alts));
    }
    Element el{true, rule};
    el.min = e.min;
    el.max = e.max;
    if (!el.counted()) return std::vector<Seq>{{Element{true, rule}}};
    return std::vector<Seq>{{el}};
  }

  // Whether every match of the expression consumes at least one byte (conservative: a rule
  // met again while deciding counts as not consuming).
  bool consumes(ExprId id) {
    const Expr& e = g_.expr(id);
    switch (e.kind) {
      case Expr::Kind::kBytes:
        return !e.bytes.empty();
      case Expr::Kind::kRule: {
        if (auto it = consumes_.find(e.rule); it != consumes_.end()) return it->second;
        if (!g_.rule(e.rule).body) return false;
        consumes_[e.rule] = false;  // recursion: not known to consume
        const bool c = consumes(*g_.rule(e.rule).body);
        consumes_[e.rule] = c;
        return c;
      }
      case Expr::Kind::kSequence:
        return std::any_of(e.children.begin(), e.children.end(),
                           [&](ExprId c) { return consumes(c); });
      case Expr::Kind::kChoice:
        return !e.children.empty() && std::all_of(e.children.begin(), e.children.end(),
                                                  [&](ExprId c) { return consumes(c); });
      case Expr::Kind::kRepeat:
        return e.min > 0 && consumes(e.children[0]);
    }
    return false;
  }

  std::uint32_t new_rule() {
    out_.rules.push_back(FlatRule{current_ + "#" + std::to_string(out_.rules.size()), {}});
    return static_cast<std::uint32_t>(out_.rules.size() - 1);
  }
  std::uint32_t helper(std::vector<Seq> alts) {
    std::uint32_t r = new_rule();
    out_.rules[r].alts = std::move(alts);
    return r;
  }
  std::uint32_t set_index(const ByteSet& s) {
    auto key = s.words;
    auto it = sets_.find(key);
    if (it != sets_.end()) return it->second;
    out_.byte_sets.push_back(s);
    auto idx = static_cast<std::uint32_t>(out_.byte_sets.size() - 1);
    sets_.emplace(key, idx);
    return idx;
  }

  const Grammar& g_;
  CompileLimits limits_;
  FlatGrammar out_;
  std::string current_;
  std::uint32_t current_rule_ = 0;
  std::vector<std::uint32_t> inlining_;  // rules whose bodies are being inlined, innermost last
  struct ChainCopy {
    std::uint32_t rule, outer, left;
  };
  std::vector<ChainCopy> chains_;
  std::map<std::array<std::uint64_t, 4>, std::uint32_t> sets_;
  std::map<RuleId, bool> consumes_;
};

// The fixpoints below (nullable, productive, FIRST, FOLLOW) are solved with worklists over the
// rules' dependencies rather than by sweeping every rule until nothing changes: a sweep carries
// a fact one step against the rules' order per pass, so a chain of n rules (a spelt-out
// x{0,n} of an x that may match nothing makes one) took n passes of n rules, seconds for
// n = 3,000 under ASan (tests/fuzz found `(){1,3010}`). Each worklist visits a rule again only
// when something it depends on changed, which a byte set can do at most 256 times.
Result<void> analyse(FlatGrammar& g) {
  const std::size_t n = g.rules.size();
  // A counted x{0,n} matches the empty string whatever x is, and finishes whatever x does.
  auto nullable_by_count = [](const Element& e) { return e.counted() && e.min == 0; };
  // Every alternative gets an index; uses[b] lists the alternative of each occurrence of rule b
  // whose verdict waits on b.
  std::vector<std::uint32_t> alt_rule;
  std::vector<std::vector<std::uint32_t>> uses_nullable(n), uses_productive(n);
  std::vector<std::uint32_t> need_nullable, need_productive;
  constexpr std::uint32_t kNever = 0xffffffffu;
  for (std::size_t r = 0; r < n; ++r)
    for (const auto& seq : g.rules[r].alts) {
      const auto alt = static_cast<std::uint32_t>(alt_rule.size());
      alt_rule.push_back(static_cast<std::uint32_t>(r));
      std::uint32_t wait_nullable = 0, wait_productive = 0;
      bool has_bytes = false, has_empty_set = false;
      for (const auto& e : seq) {
        if (!e.is_rule) {
          has_bytes = true;
          if (g.byte_sets[e.index].empty()) has_empty_set = true;
          continue;
        }
        if (!nullable_by_count(e)) {
          ++wait_nullable;
          uses_nullable[e.index].push_back(alt);
        }
        if (e.min != 0) {
          ++wait_productive;
          uses_productive[e.index].push_back(alt);
        }
      }
      need_nullable.push_back(has_bytes ? kNever : wait_nullable);
      need_productive.push_back(has_empty_set ? kNever : wait_productive);
    }
  // A rule is nullable (productive) once one of its alternatives has every element it waits on
  // nullable (productive) and no byte element (no empty byte set): count down per alternative.
  auto solve = [&](std::vector<std::uint32_t>& need,
                   const std::vector<std::vector<std::uint32_t>>& uses, std::vector<bool>& mark) {
    std::vector<std::uint32_t> work;
    for (std::size_t a = 0; a < need.size(); ++a)
      if (need[a] == 0 && !mark[alt_rule[a]]) {
        mark[alt_rule[a]] = true;
        work.push_back(alt_rule[a]);
      }
    while (!work.empty()) {
      const std::uint32_t b = work.back();
      work.pop_back();
      for (std::uint32_t a : uses[b]) {
        if (need[a] == kNever || need[a] == 0) continue;
        if (--need[a] == 0 && !mark[alt_rule[a]]) {
          mark[alt_rule[a]] = true;
          work.push_back(alt_rule[a]);
        }
      }
    }
  };
  g.nullable.assign(n, false);
  std::vector<bool> productive(n, false);
  solve(need_nullable, uses_nullable, g.nullable);
  solve(need_productive, uses_productive, productive);
  for (std::size_t r = 0; r < n; ++r)
    if (!productive[r])
      return Error(ErrorCode::kInvalidArgument,
                   "grammar rule '" + g.rules[r].name +
                       "' can never finish (it matches no string), so no output could satisfy it");
  auto element_nullable = [&](const Element& e) {
    return e.is_rule && (g.nullable[e.index] || nullable_by_count(e));
  };
  // Left recursion: an edge A -> B when B can start A's match. A cycle would make the
  // matcher's closure loop, so it is refused here.
  std::vector<std::vector<std::uint32_t>> left(n);
  for (std::size_t r = 0; r < n; ++r)
    for (const auto& seq : g.rules[r].alts)
      for (const auto& e : seq) {
        if (!e.is_rule) break;
        left[r].push_back(e.index);
        if (!element_nullable(e)) break;
      }
  std::vector<int> color(n, 0);  // 0 new, 1 on the path, 2 done
  for (std::size_t start = 0; start < n; ++start) {
    if (color[start]) continue;
    std::vector<std::pair<std::uint32_t, std::size_t>> stack{
        {static_cast<std::uint32_t>(start), 0}};
    color[start] = 1;
    while (!stack.empty()) {
      auto& [r, i] = stack.back();
      if (i == left[r].size()) {
        color[r] = 2;
        stack.pop_back();
        continue;
      }
      std::uint32_t next = left[r][i++];
      if (color[next] == 1)
        return Error(ErrorCode::kInvalidArgument,
                     "grammar rule '" + g.rules[next].name +
                         "' is left-recursive (it can begin with itself); rewrite it with "
                         "repetition, e.g. list ::= item (\",\" item)*");
      if (color[next] == 0) {
        color[next] = 1;
        stack.push_back({next, 0});
      }
    }
  }

  // FIRST and FOLLOW sets, used by the mask precomputation to reject tokens that leave a rule
  // with a byte nothing can follow it with. `into[b]` lists the rules whose set takes b's.
  auto propagate = [n](std::vector<ByteSet>& set, std::vector<bool>* end,
                       const std::vector<std::vector<std::uint32_t>>& into) {
    std::vector<std::uint32_t> work;
    std::vector<bool> queued(n, true);
    for (std::size_t r = n; r-- > 0;)
      work.push_back(static_cast<std::uint32_t>(r));
    while (!work.empty()) {
      const std::uint32_t b = work.back();
      work.pop_back();
      queued[b] = false;
      for (std::uint32_t r : into[b]) {
        const ByteSet before = set[r];
        set[r] |= set[b];
        bool changed = !(before == set[r]);
        if (end && (*end)[b] && !(*end)[r]) (*end)[r] = changed = true;
        if (changed && !queued[r]) {
          queued[r] = true;
          work.push_back(r);
        }
      }
    }
  };
  // FIRST(r) holds the byte sets and the FIRST of the rules that can begin r.
  g.first.assign(n, ByteSet{});
  std::vector<std::vector<std::uint32_t>> into(n);
  for (std::size_t r = 0; r < n; ++r)
    for (const auto& seq : g.rules[r].alts)
      for (const auto& e : seq) {
        if (e.is_rule) {
          into[e.index].push_back(static_cast<std::uint32_t>(r));
        } else {
          g.first[r] |= g.byte_sets[e.index];
        }
        if (!element_nullable(e)) break;
      }
  propagate(g.first, nullptr, into);
  // FOLLOW(b) holds, for each occurrence of b, the FIRST of what may come after it (a counted
  // copy may be followed by the next copy) and, where all of that may be empty, FOLLOW of the
  // rule it occurs in (and whether input may end).
  g.follow.assign(n, ByteSet{});
  g.follow_end.assign(n, false);
  g.follow_end[g.root] = true;
  for (auto& v : into)
    v.clear();
  for (std::size_t r = 0; r < n; ++r)
    for (const auto& seq : g.rules[r].alts) {
      ByteSet rest;  // FIRST of seq[i + 1, end)
      bool rest_nullable = true;
      for (std::size_t i = seq.size(); i-- > 0;) {
        const Element& e = seq[i];
        if (e.is_rule) {
          g.follow[e.index] |= rest;
          if (e.counted() && e.max > 1) g.follow[e.index] |= g.first[e.index];
          if (rest_nullable) into[r].push_back(e.index);
        }
        if (element_nullable(e)) {
          rest |= g.first[e.index];
        } else {
          rest = e.is_rule ? g.first[e.index] : g.byte_sets[e.index];
          rest_nullable = false;
        }
      }
    }
  propagate(g.follow, &g.follow_end, into);
  return {};
}

}  // namespace

Result<FlatGrammar> flatten_grammar(const Grammar& grammar, const CompileLimits& limits) {
  if (grammar.rule_count() == 0) return Error(ErrorCode::kInvalidArgument, "grammar has no rules");
  auto flat = Flattener(grammar, limits).run();
  if (!flat) return flat.error();
  auto ok = analyse(*flat);
  if (!ok) return ok.error();
  return flat;
}

}  // namespace weft::grammar
