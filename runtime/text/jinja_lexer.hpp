#pragma once
// The lexer of the Jinja subset: template text into tokens, applying the whitespace rules of
// the environment transformers uses (trim_blocks, lstrip_blocks, `{%-`/`-%}` and `+`
// markers, newlines normalised to "\n" and one trailing newline dropped).

#include <string>
#include <string_view>
#include <vector>

#include "runtime/text/jinja_value.hpp"
#include "weft/error.hpp"

namespace weft::jinja {

enum class TokenKind {
  kText,        // literal template text, already whitespace-trimmed
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the unescaped value
  kInteger,
  kFloat,
  kOperator,  // text holds the operator: + - * / // % ** ~ == != < > <= >= = . , : | ( ) [ ] { }
  kEnd,
};

struct Token {
  TokenKind kind;
  std::string text;
  Value number;  // kInteger, kFloat
  int line = 1;
  int column = 1;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// `source_name` prefixes error messages ("<file>:<line>:<column>: ...").
Result<std::vector<Token>> tokenize(std::string_view source, std::string_view source_name,
                                    const LexOptions& options = {});

}  // namespace weft::jinja
