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
};

struct FlatRule {
  std::string name;
  std::vector<std::vector<Element>> alts;
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
};

struct CompileLimits {
  // x{m,n} is expanded; this bounds the copies so a schema cannot blow up compile time.
  std::uint32_t max_repeat_expansion = 4096;
  std::uint32_t max_rules = 200000;
};

Result<FlatGrammar> flatten_grammar(const Grammar& grammar, const CompileLimits& limits = {});

}  // namespace weft::grammar
