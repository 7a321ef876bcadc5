#pragma once
// Parses one Jinja expression at the stream's position (jinja_expression_parser.cpp).

#include "runtime/text/jinja_ast.hpp"
#include "runtime/text/jinja_token_stream.hpp"

namespace weft::jinja {

// `a if c else b`, down to primaries with their filters and tests.
ExprPtr parse_expression(TokenStream& stream);
// An expression, or several separated by commas as a tuple; without `with_condition` the
// parts stop before `if` (for `for x in xs if cond`).
ExprPtr parse_tuple(TokenStream& stream, bool with_condition = true);

}  // namespace weft::jinja
