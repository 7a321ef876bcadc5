#pragma once
// Regular expressions (the ECMAScript subset JSON Schema `pattern` and users write) as
// grammar expressions: literals and escapes (\d \w \s \D \W \S \n \t \xHH \uHHHH ...),
// classes with ranges and negation, `.`, groups ((...), (?:...), (?<name>...)), alternation,
// quantifiers (* + ? {m} {m,} {m,n}, lazy forms accepted: the language is the same), and ^/$
// at the ends of a top-level alternative. Backreferences, lookaround and \b are refused with
// the offset: they are not regular, or not expressible per byte.

#include <string_view>
#include <vector>

#include "runtime/grammar/grammar.hpp"
#include "weft/error.hpp"

namespace weft::grammar {

struct RegexOptions {
  // JSON Schema semantics: the pattern matches anywhere in the string unless anchored, so an
  // unanchored side gets `.*`. Off: the whole text must match (the --regex behaviour).
  bool search = false;
  // Emit each character as it is written inside a JSON string: '"', '\\' and control
  // characters become their escapes.
  bool json_string = false;
};

Result<ExprId> regex_to_expr(Grammar& g, std::string_view pattern,
                             const RegexOptions& options = {});
// A grammar whose root matches exactly the strings the regex matches.
Result<Grammar> regex_to_grammar(std::string_view pattern);
// One character of `set` as it appears inside a JSON string literal (escaping what JSON
// requires, one canonical escape each).
ExprId json_string_char(Grammar& g, const std::vector<CodepointRange>& set);

}  // namespace weft::grammar
