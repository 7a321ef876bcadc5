#pragma once
// Parses the EBNF grammar text of docs/grammars.md (GBNF-like: `name ::= expr`, with string
// literals, character classes, grouping, alternation and * + ? {m,n}) into a Grammar whose
// root is the rule named `root`. Errors carry the line and column.

#include <string_view>

#include "runtime/grammar/grammar.hpp"
#include "runtime/grammar/grammar_compiler.hpp"
#include "weft/error.hpp"

namespace weft::grammar {

Result<Grammar> parse_ebnf(std::string_view text);

// The same grammar flattened (flatten_grammar with its default limits), for
// CompiledGrammar::compile: the parser flattens the grammar to check it and keeps that form
// instead of it being flattened a second time by the compiler.
Result<FlatGrammar> parse_ebnf_flat(std::string_view text);

}  // namespace weft::grammar
