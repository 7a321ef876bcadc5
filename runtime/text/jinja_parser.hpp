#pragma once
// The parser of the Jinja subset: tokens into a statement tree, with Jinja's operator
// precedence. Unknown statements, filters and tests are errors at parse time, with the line
// and column of the offending token.

#include <string_view>
#include <vector>

#include "runtime/text/jinja_ast.hpp"
#include "runtime/text/jinja_lexer.hpp"
#include "weft/error.hpp"

namespace weft::jinja {

Result<Body> parse(const std::vector<Token>& tokens, std::string_view source_name);

// The filters and tests the evaluator implements (jinja_builtins.cpp).
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

}  // namespace weft::jinja
