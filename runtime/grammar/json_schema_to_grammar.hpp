#pragma once
// JSON Schema (2020-12) -> Grammar. Every keyword that constrains an instance is either
// generated exactly, generated as a documented subset of its valid instances (never a value a
// validator would reject), or refused with its JSON pointer and name: docs/grammars.md has the
// table. allOf and $ref beside other keywords are merged into one schema
// (json_schema_merge.cpp); enum/const values are checked against their sibling keywords
// (json_schema_validate.cpp). Annotations and keywords JSON Schema does not define are ignored
// (with a warning for the latter), as validators do; so are unknown formats.
//
// Like XGrammar's strict mode, a missing additionalProperties (or items after prefixItems)
// means "none": outputs stay within what the schema describes and still validate.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/grammar/grammar.hpp"
#include "runtime/grammar/grammar_compiler.hpp"
#include "weft/error.hpp"

namespace weft::grammar {

struct JsonGrammarOptions {
  // Compact output (no whitespace between tokens) by default; flexible allows up to
  // max_whitespace bytes of ' ', '\t', '\n' around every structural character. It is bounded
  // so a model cannot stall forever in whitespace.
  bool flexible_whitespace = false;
  std::uint32_t max_whitespace = 16;
  // Strict (the default): a keyword the converter cannot enforce exactly is an error naming
  // it and its JSON pointer. Not strict: such a keyword (and uniqueItems: true) is skipped,
  // so the output follows the rest of the schema but may break the skipped constraint
  // (OpenAI's json_schema with strict false or absent, docs/grammars.md).
  bool strict = true;
  // When set, receives what was accepted but not enforced (an unknown `format`, an annotation
  // in the schema's own words), each naming its JSON pointer.
  std::vector<std::string>* warnings = nullptr;
};

Result<Grammar> json_schema_to_grammar(std::string_view schema_json,
                                       const JsonGrammarOptions& options = {});
// The same grammar flattened (flatten_grammar with its default limits), for
// CompiledGrammar::compile: the converter flattens the grammar to check it, and keeps that
// flat form here instead of it being flattened a second time by the compiler.
Result<FlatGrammar> json_schema_to_flat_grammar(std::string_view schema_json,
                                                const JsonGrammarOptions& options = {});
// JSON mode: any JSON object.
Grammar json_object_grammar(const JsonGrammarOptions& options = {});

}  // namespace weft::grammar
