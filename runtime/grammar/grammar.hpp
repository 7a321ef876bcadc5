#pragma once
// The one grammar form every constraint compiles to: named rules whose bodies are expressions
// over bytes (byte sets, sequences, choices, rule references, bounded or unbounded
// repetition). The JSON Schema, regex and EBNF front ends build a Grammar; the matcher
// flattens it (grammar_compiler.hpp) and runs it as a byte-level pushdown automaton.
//
// Everything is bytes, not code points: a character class over Unicode becomes a choice of
// UTF-8 byte sequences (codepoints()), so the matcher never decodes UTF-8 and a token that
// ends inside a multi-byte character is matched exactly.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weft::grammar {

// A set of byte values, one bit each.
struct ByteSet {
  std::array<std::uint64_t, 4> words{};

  static ByteSet single(std::uint8_t b) {
    ByteSet s;
    s.set(b);
    return s;
  }
  static ByteSet range(std::uint8_t lo, std::uint8_t hi) {
    ByteSet s;
    s.set_range(lo, hi);
    return s;
  }
  void set(std::uint8_t b) { words[b >> 6] |= std::uint64_t{1} << (b & 63); }
  void set_range(std::uint8_t lo, std::uint8_t hi) {
    for (unsigned b = lo; b <= hi; ++b)
      set(static_cast<std::uint8_t>(b));
  }
  bool test(std::uint8_t b) const { return (words[b >> 6] >> (b & 63)) & 1; }
  bool empty() const { return (words[0] | words[1] | words[2] | words[3]) == 0; }
  int count() const;
  ByteSet& operator|=(const ByteSet& o) {
    for (int i = 0; i < 4; ++i)
      words[i] |= o.words[i];
    return *this;
  }
  bool operator==(const ByteSet&) const = default;
};

// An inclusive range of Unicode code points.
struct CodepointRange {
  std::uint32_t lo = 0;
  std::uint32_t hi = 0;
};

inline constexpr std::uint32_t kUnbounded = 0xffffffffu;

using ExprId = std::uint32_t;
using RuleId = std::uint32_t;

struct Expr {
  enum class Kind : std::uint8_t { kBytes, kRule, kSequence, kChoice, kRepeat };
  Kind kind = Kind::kSequence;
  ByteSet bytes;                   // kBytes: one byte from this set
  RuleId rule = 0;                 // kRule
  std::vector<ExprId> children;    // kSequence, kChoice; kRepeat has exactly one
  std::uint32_t min = 0;           // kRepeat
  std::uint32_t max = kUnbounded;  // kRepeat; kUnbounded for * and +
};

struct Rule {
  std::string name;
  std::optional<ExprId> body;  // empty while declared but not yet defined
};

class Grammar {
 public:
  ExprId bytes(const ByteSet& set);
  ExprId byte(std::uint8_t b) { return bytes(ByteSet::single(b)); }
  // The exact byte string; the empty string is the empty sequence.
  ExprId literal(std::string_view text);
  // Any one code point of the set, as its UTF-8 encoding (surrogates never match). An empty
  // set gives an expression that matches nothing, which the compiler reports.
  ExprId codepoints(std::vector<CodepointRange> set);
  ExprId ref(RuleId rule);
  ExprId sequence(std::vector<ExprId> items);
  ExprId choice(std::vector<ExprId> items);
  ExprId repeat(ExprId item, std::uint32_t min, std::uint32_t max);
  ExprId optional(ExprId item) { return repeat(item, 0, 1); }
  ExprId star(ExprId item) { return repeat(item, 0, kUnbounded); }
  ExprId plus(ExprId item) { return repeat(item, 1, kUnbounded); }
  ExprId empty() { return sequence({}); }

  // Declares a rule (body set later, so rules may refer to each other in any order).
  RuleId add_rule(std::string name);
  RuleId add_rule(std::string name, ExprId body) {
    RuleId id = add_rule(std::move(name));
    set_body(id, body);
    return id;
  }
  void set_body(RuleId rule, ExprId body) { rules_[rule].body = body; }
  std::optional<RuleId> find_rule(std::string_view name) const;

  const Expr& expr(ExprId id) const { return exprs_[id]; }
  const Rule& rule(RuleId id) const { return rules_[id]; }
  std::size_t rule_count() const { return rules_.size(); }
  std::size_t expr_count() const { return exprs_.size(); }

  RuleId root() const { return root_; }
  void set_root(RuleId rule) { root_ = rule; }

  // EBNF text in the syntax of docs/grammars.md (for debugging and error messages).
  std::string to_string() const;

 private:
  ExprId add(Expr e);
  std::vector<Expr> exprs_;
  std::vector<Rule> rules_;
  RuleId root_ = 0;
};

// Sorts and merges ranges; clips to U+10FFFF.
std::vector<CodepointRange> normalize_ranges(std::vector<CodepointRange> set);
// The complement within U+0000..U+10FFFF.
std::vector<CodepointRange> complement_ranges(const std::vector<CodepointRange>& set);
// Appends the UTF-8 encoding of a code point.
void append_utf8(std::string& out, std::uint32_t cp);

}  // namespace weft::grammar
