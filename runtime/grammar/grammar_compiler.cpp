#include "runtime/grammar/grammar_compiler.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "runtime/grammar/grammar_analysis.hpp"

namespace weft::grammar {
namespace {

using Seq = std::vector<Element>;

// A rule repeated a bounded number of times is inlined into each copy when it is this small.
constexpr std::size_t kMaxInlineAlts = 32;
constexpr std::size_t kMaxInlineElements = 96;

// Lowers each rule body straight into the alternatives it becomes: a choice appends its
// children's alternatives, a sequence appends its children's elements to one alternative, so no
// expression's lowering is built in a vector of its own and copied into its parent's (a
// fuzzed pattern of many `.*` alternatives spells out ~250,000 elements, and copying them up
// through every level of nesting took most of the compile time). Errors are kept in `error_`
// and reported by a false return, on the same traversal (and so the same error) as before.
class Flattener {
 public:
  Flattener(const Grammar& g, const CompileLimits& limits)
      : g_(g),
        limits_(limits),
        alt_counts_(g.expr_count(), kNotCounted),
        set_of_expr_(g.expr_count(), kNotCounted),
        helper_of_expr_(g.expr_count(), kNotCounted) {}

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
      std::vector<Seq> alts;
      if (!lower_alts(*g_.rule(r).body, alts)) return std::move(*error_);
      out_.rules[r].alts = std::move(alts);
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
  static constexpr std::uint32_t kNotCounted = 0xffffffffu;

  bool fail(Error e) {
    error_ = std::move(e);
    return false;
  }

  // Checked on entering every expression, so a grammar stops growing as soon as it is over.
  bool within_limits() {
    if (out_.rules.size() > limits_.max_rules)
      return fail(Error(ErrorCode::kResourceExhausted, "grammar too large: more than " +
                                                           std::to_string(limits_.max_rules) +
                                                           " rules after expanding repetitions"));
    return true;
  }

  // How many alternatives the expression lowers to: one, except for a choice, which has its
  // children's (capped: only 0, 1 and "several" matter, and a bound to reserve).
  std::uint32_t alt_count(ExprId id) {
    const Expr& e = g_.expr(id);
    if (e.kind != Expr::Kind::kChoice) return 1;
    if (alt_counts_[id] != kNotCounted) return alt_counts_[id];
    std::uint64_t n = 0;
    for (ExprId c : e.children)
      n = std::min<std::uint64_t>(n + alt_count(c), 1u << 20);
    alt_counts_[id] = static_cast<std::uint32_t>(n);
    return alt_counts_[id];
  }

  // Appends the alternatives of `id` to `alts`.
  bool lower_alts(ExprId id, std::vector<Seq>& alts) {
    if (!within_limits()) return false;
    const Expr& e = g_.expr(id);
    if (e.kind == Expr::Kind::kChoice) {
      alts.reserve(alts.size() + std::min<std::uint32_t>(alt_count(id), 1024));
      return lower_choice(e, alts);
    }
    Seq seq;
    if (e.kind == Expr::Kind::kSequence) seq.reserve(e.children.size());
    if (!lower_single(id, e, seq)) return false;
    alts.push_back(std::move(seq));
    return true;
  }

  // Appends the one alternative of `id` (alt_count(id) == 1) to `seq`.
  bool lower_into(ExprId id, Seq& seq) {
    if (!within_limits()) return false;
    const Expr& e = g_.expr(id);
    if (e.kind != Expr::Kind::kChoice) return lower_single(id, e, seq);
    std::vector<Seq> part;
    if (!lower_choice(e, part)) return false;
    seq.insert(seq.end(), part[0].begin(), part[0].end());
    return true;
  }

  bool lower_choice(const Expr& e, std::vector<Seq>& alts) {
    for (ExprId c : e.children)
      if (!lower_alts(c, alts)) return false;
    return true;
  }

  // The helper rule of a choice (an expression of other than one alternative) used as one
  // element. A choice met again outside any inlined copy reuses the rule its first lowering
  // made, as a named rule is shared by its references: a pattern's `.` or `\d` is one
  // expression used at every place it is written, and `a|||...|b` in a JSON Schema pattern puts
  // `.*` (a JSON string character: ~50 alternatives and their UTF-8 helpers) around each of its
  // alternatives. Inside an inlined copy (inlining_ not empty) every helper stays the copy's
  // own: the copies' helpers are matched up by position (chains_), and each is precomputed in
  // its copy's context.
  bool choice_helper(ExprId id, std::uint32_t& rule) {
    const bool shared = inlining_.empty();
    if (shared && helper_of_expr_[id] != kNotCounted) {
      if (!within_limits()) return false;
      rule = helper_of_expr_[id];
      return true;
    }
    std::vector<Seq> alts;
    if (!lower_alts(id, alts)) return false;
    rule = helper(std::move(alts));
    if (shared) helper_of_expr_[id] = rule;
    return true;
  }

  // Appends the lowering of an expression that is not a choice (one alternative) to `seq`.
  bool lower_single(ExprId id, const Expr& e, Seq& seq) {
    switch (e.kind) {
      case Expr::Kind::kBytes:
        seq.push_back(Element{false, set_index(id, e.bytes)});
        return true;
      case Expr::Kind::kRule:
        seq.push_back(Element{true, e.rule});
        return true;
      case Expr::Kind::kSequence:
        for (ExprId c : e.children) {
          if (alt_count(c) == 1) {
            if (!lower_into(c, seq)) return false;
            continue;
          }
          std::uint32_t rule = 0;
          if (!choice_helper(c, rule)) return false;
          seq.push_back(Element{true, rule});
        }
        return true;
      case Expr::Kind::kRepeat:
        return lower_repeat(e, seq);
      case Expr::Kind::kChoice:
        break;
    }
    return fail(Error(ErrorCode::kInternal, "unknown grammar expression kind"));
  }

  bool lower_repeat(const Expr& e, Seq& out) {
    if (e.max != kUnbounded && e.min > e.max)
      return fail(Error(ErrorCode::kInvalidArgument,
                        "repetition {" + std::to_string(e.min) + "," + std::to_string(e.max) +
                            "} in rule '" + current_ + "' has its minimum above its maximum"));
    std::uint64_t copies = e.max == kUnbounded ? e.min + 1ull : e.max;
    if (limits_.counted_above != 0 && copies > limits_.counted_above && consumes(e.children[0]))
      return lower_counted(e, out);
    if (copies > limits_.max_repeat_expansion)
      return fail(Error(ErrorCode::kResourceExhausted,
                        "repetition bound " + std::to_string(copies) + " in rule '" + current_ +
                            "' exceeds the limit of " +
                            std::to_string(limits_.max_repeat_expansion)));
    Element x;
    if (alt_count(e.children[0]) != 1) {
      x.is_rule = true;
      if (!choice_helper(e.children[0], x.index)) return false;
    } else {
      std::vector<Seq> item;
      if (!lower_alts(e.children[0], item)) return false;
      x = item[0].size() == 1 ? item[0][0] : Element{true, helper(std::move(item))};
    }
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
        std::vector<Seq> alts;
        const bool ok = lower_alts(*body, alts);
        first_helpers.second = static_cast<std::uint32_t>(out_.rules.size());
        inlining_.pop_back();
        if (!ok) return false;
        std::size_t elements = 0;
        for (const auto& a : alts)
          elements += a.size();
        if (alts.size() <= kMaxInlineAlts && elements <= kMaxInlineElements) {
          inlined = std::move(alts);
          inline_body = *body;
        }
      }
    }
    out.insert(out.end(), e.min, x);
    if (e.max == kUnbounded) {
      // H ::= x H | ""
      std::uint32_t h = new_rule();
      out_.rules[h].alts = {Seq{x, Element{true, h}}, Seq{}};
      out.push_back(Element{true, h});
    } else if (e.max > e.min) {
      // O_k ::= x O_{k-1} | "" nests the optional tail, so the stack stays flat (tail calls)
      // and the grammar stays linear in the bound.
      // Each copy lowers the inlined body afresh, so the helper rules inside it (a UTF-8
      // sequence, an escape) belong to that copy alone and are precomputed in its context
      // too, rather than shared by every copy.
      auto copy = [&](std::optional<std::uint32_t> next, std::vector<Seq>& alts) -> bool {
        if (!inline_body) {
          alts.push_back(next ? Seq{x, Element{true, *next}} : Seq{x});
        } else if (!next) {
          alts = inlined;  // the first copy uses the lowering made above
        } else {
          inlining_.push_back(x.index);
          const auto begin = static_cast<std::uint32_t>(out_.rules.size());
          const bool ok = lower_alts(*inline_body, alts);
          copy_helpers.push_back({begin, static_cast<std::uint32_t>(out_.rules.size())});
          inlining_.pop_back();
          if (!ok) return false;
          for (auto& a : alts)
            a.push_back(Element{true, *next});
        }
        alts.emplace_back();
        return true;
      };
      std::uint32_t prev = new_rule();
      {
        std::vector<Seq> first;
        if (!copy(std::nullopt, first)) return false;
        out_.rules[prev].alts = std::move(first);
      }
      std::vector<std::uint32_t> chain{prev};
      for (std::uint32_t k = 1; k < e.max - e.min; ++k) {
        std::vector<Seq> alts;
        if (!copy(prev, alts)) return false;
        std::uint32_t r = new_rule();
        out_.rules[r].alts = std::move(alts);
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
      out.push_back(Element{true, prev});
    }
    return true;
  }

  // x{m,n} as one counted element over a rule of x's own: x's alternatives when x is a small
  // rule (so its positions sit on this element alone and are precomputed with its count, see
  // CompiledGrammar), otherwise x itself.
  bool lower_counted(const Expr& e, Seq& out) {
    const std::uint64_t bound = e.max == kUnbounded ? e.min : e.max;
    if (bound > limits_.max_counted_repeat)
      return fail(Error(ErrorCode::kResourceExhausted,
                        "repetition bound " + std::to_string(bound) + " in rule '" + current_ +
                            "' exceeds the limit of " +
                            std::to_string(limits_.max_counted_repeat)));
    const Expr& item_expr = g_.expr(e.children[0]);
    std::uint32_t rule = 0;
    if (item_expr.kind == Expr::Kind::kRule && item_expr.rule != current_rule_ &&
        std::find(inlining_.begin(), inlining_.end(), item_expr.rule) == inlining_.end() &&
        g_.rule(item_expr.rule).body) {
      inlining_.push_back(item_expr.rule);
      std::vector<Seq> alts;
      const bool ok = lower_alts(*g_.rule(item_expr.rule).body, alts);
      inlining_.pop_back();
      if (!ok) return false;
      std::size_t elements = 0;
      for (const auto& a : alts)
        elements += a.size();
      rule = alts.size() <= kMaxInlineAlts && elements <= kMaxInlineElements
                 ? helper(std::move(alts))
                 : item_expr.rule;
    } else {
      std::vector<Seq> alts;
      if (!lower_alts(e.children[0], alts)) return false;
      rule = helper(std::move(alts));
    }
    Element el{true, rule};
    el.min = e.min;
    el.max = e.max;
    out.push_back(el.counted() ? el : Element{true, rule});
    return true;
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
  // The byte set's index, looked up once per expression (a pattern's `.` is one expression
  // lowered at every use).
  std::uint32_t set_index(ExprId id, const ByteSet& bytes) {
    if (set_of_expr_[id] != kNotCounted) return set_of_expr_[id];
    auto [it, added] =
        sets_.emplace(bytes.words, static_cast<std::uint32_t>(out_.byte_sets.size()));
    if (added) out_.byte_sets.push_back(bytes);
    set_of_expr_[id] = it->second;
    return it->second;
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
  std::vector<std::uint32_t> alt_counts_;      // per expression, kNotCounted until asked
  std::vector<std::uint32_t> set_of_expr_;     // per byte-set expression, its index once known
  std::vector<std::uint32_t> helper_of_expr_;  // per choice, its shared helper once made
  std::optional<Error> error_;
};

}  // namespace

Result<FlatGrammar> flatten_grammar(const Grammar& grammar, const CompileLimits& limits) {
  if (grammar.rule_count() == 0) return Error(ErrorCode::kInvalidArgument, "grammar has no rules");
  auto flat = Flattener(grammar, limits).run();
  if (!flat) return flat.error();
  auto ok = analyse_flat_grammar(*flat);
  if (!ok) return ok.error();
  return flat;
}

}  // namespace weft::grammar
