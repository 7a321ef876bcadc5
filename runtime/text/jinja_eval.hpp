#pragma once
// A parsed Jinja template and its evaluator. Rendering walks the statement tree with a stack
// of scopes as Jinja's do: a `for` iteration and a macro call open a scope, `if` does not,
// so `set` inside a loop is invisible after it (hence namespace()).

#include <memory>
#include <string>
#include <string_view>

#include "runtime/text/jinja_ast.hpp"
#include "runtime/text/jinja_lexer.hpp"
#include "runtime/text/jinja_value.hpp"
#include "weft/error.hpp"

namespace weft::jinja {

// A {% macro %} as a value: the definition it runs when called.
struct Macro {
  const Stmt* definition;
};

class Template {
 public:
  // Lexes and parses `source`; errors name `source_name` and the line and column.
  static Result<Template> parse(std::string_view source, std::string source_name,
                                const LexOptions& options = {});

  // Renders with `variables` as the template's globals. Errors (undefined values used in
  // operations, type errors, raise_exception) name the source, line and column.
  Result<std::string> render(const Dict& variables) const;

  const std::string& source_name() const { return source_name_; }

 private:
  Template(std::string source_name, std::shared_ptr<const Body> body)
      : source_name_(std::move(source_name)), body_(std::move(body)) {}

  std::string source_name_;
  std::shared_ptr<const Body> body_;
};

}  // namespace weft::jinja
