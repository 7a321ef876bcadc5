#pragma once
// Flattens a Grammar into the form the matcher runs: every rule is a list of alternatives,
// every alternative a sequence of elements, each element one byte set or one rule reference.
// Choices nested inside sequences and repetitions become helper rules; x* becomes the right
// recursion H ::= x H | "" (the matcher's tail calls keep its stack flat).
//
// Also checks what would make matching misbehave, before any generation starts: undefined
// rules, left recursion (the matcher's closure would never end), and rules that can never
// finish (a model could walk into a state with no way out).

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/grammar/grammar.hpp"
#include "weft/error.hpp"

namespace weft::grammar {

struct Element {
  bool is_rule = false;
  std::uint32_t index = 0;  // into FlatGrammar::byte_sets, or a rule id
  // A counted repetition of the rule, x{min,max} (max may be kUnbounded), when not {1,1}: the
  // frame at this element keeps the count of finished copies (Frame::count) instead of the
  // repetition being spelt out as max copies, so a bound of thousands costs one element. Only
  // for a rule that consumes a byte in every alternative (each copy advances the input).
  std::uint32_t min = 1;
  std::uint32_t max = 1;
  bool counted() const { return is_rule && (min != 1 || max != 1); }
  bool operator==(const Element&) const = default;
};

struct FlatRule {
  std::string name;
  std::vector<std::vector<Element>> alts;
  bool operator==(const FlatRule&) const = default;
};

struct FlatGrammar {
  std::vector<FlatRule> rules;
  std::vector<ByteSet> byte_sets;
  std::uint32_t root = 0;
  // Per rule: may it match the empty string; the bytes that can start it; the bytes that can
  // follow it anywhere in the grammar (and whether the end of input can).
  std::vector<bool> nullable;
  std::vector<ByteSet> first;
  std::vector<ByteSet> follow;
  std::vector<bool> follow_end;
  // Per rule: for an optional copy of a bounded repetition x{m,n} whose every alternative
  // consumes at least one byte, the outermost copy of its chain and how many copies are left
  // counting this one; kNoRule / 0 otherwise. A token of at most `left` bytes cannot tell this
  // copy from the outermost one, which the matcher's precomputation uses (CompiledGrammar).
  static constexpr std::uint32_t kNoRule = 0xffffffffu;
  std::vector<std::uint32_t> repeat_outer;
  std::vector<std::uint32_t> repeat_left;
  bool operator==(const FlatGrammar&) const = default;
};

struct CompileLimits {
  // x{m,n} is spelt out as copies up to this many (max, or min for x{m,}); above it, when x
  // consumes a byte in every alternative, it is a counted element (Element::min/max) instead.
  // 0: always spell out.
  std::uint32_t counted_above = 32;
  // x{m,n} spelt out is bounded by this so a schema cannot blow up compile time; so is a
  // counted repetition's bound by max_counted_repeat.
  std::uint32_t max_repeat_expansion = 4096;
  std::uint32_t max_counted_repeat = 1000000;
  std::uint32_t max_rules = 200000;
};

Result<FlatGrammar> flatten_grammar(const Grammar& grammar, const CompileLimits& limits = {});

}  // namespace weft::grammar
