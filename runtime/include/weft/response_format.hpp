#pragma once
// What shape a request's output must have (constrained generation, docs/grammars.md). The
// engine compiles it when the request is submitted, so a bad schema, regex or grammar is an
// error of submit, naming what was wrong and where, before any token is generated. While it
// runs, only tokens that keep the output a prefix of something the format allows can be
// sampled, end-of-sequence only where the output is complete, and a request whose output can
// no longer continue finishes with FinishReason::kStop.

#include <string>

namespace weft {

struct ResponseFormat {
  enum class Type {
    kText,        // unconstrained (the default)
    kJsonObject,  // any JSON object (OpenAI's json_object)
    kJsonSchema,  // `source` is a JSON Schema (OpenAI's json_schema)
    kRegex,       // `source` is a regular expression the whole output matches
    kGrammar,     // `source` is EBNF grammar text with a rule named root
    // `source` describes tool calls (runtime/grammar/tool_call_grammar.hpp): the model
    // family's call format, the functions and their parameter schemas, required or auto.
    kToolCalls,
  };
  Type type = Type::kText;
  std::string source;
  // JSON output: compact (no whitespace between tokens) by default; true allows a bounded
  // run of spaces, tabs and newlines around structural characters.
  bool flexible_whitespace = false;
  // JSON Schema: true refuses a keyword that cannot be enforced exactly (naming it and its
  // JSON pointer); false skips it and constrains the rest.
  bool strict = true;

  bool constrained() const { return type != Type::kText; }
};

}  // namespace weft
