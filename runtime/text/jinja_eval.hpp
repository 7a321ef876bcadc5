#pragma once
// A parsed Jinja template and its evaluator. Rendering walks the statement tree with a stack
// of scopes as Jinja's do: a `for` iteration and a macro call open a scope, `if` does not,
// so `set` inside a loop is invisible after it (hence namespace()).

#include <cstdint>
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

// The work one render may do (docs/chat-templates.md, "Limits"). A chat template comes with a
// model folder, so it is untrusted input: three nested loops over a 300-character string run
// 27 million iterations (tests/fuzz found templates that rendered for minutes). Jinja and HF
// transformers have no such bounds. The step and output limits grow with the size of the
// variables given (`per_input_byte` for each byte of their strings), so a long conversation
// renders whatever its length; the loop limit does not.
struct RenderLimits {
  // Loop iterations and macro calls.
  std::uint64_t max_loop_iterations = 100000;
  // Evaluation steps: each statement run, expression evaluated, loop iteration and macro call,
  // plus, for a filter or method call, one per value in its target (nested values included)
  // and per 64 bytes of its strings (but `length`, `count`, `first`, `last`, `default` and
  // `get`, which look at a few).
  std::uint64_t max_steps = 1000000;
  // The rendered text, and any string built while rendering.
  std::size_t max_output_bytes = std::size_t{1} << 20;
  std::uint64_t per_input_byte = 4;
};

class Template {
 public:
  // Lexes and parses `source`; errors name `source_name` and the line and column.
  static Result<Template> parse(std::string_view source, std::string source_name,
                                const LexOptions& options = {});

  // Renders with `variables` as the template's globals. Errors (undefined values used in
  // operations, type errors, raise_exception) name the source, line and column.
  Result<std::string> render(const Dict& variables, const RenderLimits& limits = {}) const;

  const std::string& source_name() const { return source_name_; }

 private:
  Template(std::string source_name, std::shared_ptr<const Body> body)
      : source_name_(std::move(source_name)), body_(std::move(body)) {}

  std::string source_name_;
  std::shared_ptr<const Body> body_;
};

}  // namespace weft::jinja
