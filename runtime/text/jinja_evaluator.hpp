#pragma once
// The evaluator of a parsed template (Template::render, jinja_eval.hpp): a walk of the statement
// tree with a stack of scopes, bounded by RenderLimits. Statements are run in jinja_eval.cpp,
// expressions evaluated in jinja_eval_expr.cpp.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/text/jinja_ast.hpp"
#include "runtime/text/jinja_builtins.hpp"
#include "runtime/text/jinja_eval.hpp"
#include "runtime/text/jinja_scope.hpp"
#include "runtime/text/jinja_value.hpp"

namespace weft::jinja::detail {

struct LocatedFailure {
  int line;
  int column;
  std::string message;
  bool raised;
};

enum class Flow { kNormal, kBreak, kContinue };

class Evaluator {
 public:
  Evaluator(const Dict& variables, const RenderLimits& limits);

  std::string run(const Body& body) {
    std::string out;
    exec_body(body, out);
    return out;
  }

 private:
  using Scope = JinjaScope;

  [[noreturn]] static void fail_at(int line, int column, std::string message) {
    throw LocatedFailure{line, column, std::move(message), false};
  }

  const Value* lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
      if (const Value* found = it->find(name)) return found;
    return nullptr;
  }

  // Statements (jinja_eval.cpp).
  Flow exec_body(const Body& body, std::string& out);
  void append(std::string& out, std::string_view text, const Stmt& s);
  std::string limit_text(std::uint64_t limit, const char* unit) const;

  // Strings built by `+`, `~` and `*` are bounded like the output, so that a loop that doubles
  // a string cannot exhaust memory.
  std::string bounded(std::string s) const {
    if (s.size() > max_output_)
      fail("a string would grow beyond " + limit_text(max_output_, "bytes"));
    return s;
  }

  void step(std::uint64_t n = 1) {
    steps_ += n;
    if (steps_ > max_steps_)
      fail("the template ran more than " + limit_text(max_steps_, "evaluation steps"));
  }
  void loop_step() {
    if (++loop_steps_ > limits_.max_loop_iterations) {
      fail("the template ran more than " + std::to_string(limits_.max_loop_iterations) +
           " loop iterations and macro calls");
    }
    step();
  }

  Flow exec(const Stmt& s, std::string& out);
  void assign(const Stmt& s, Value v);
  void bind(const std::vector<std::string>& targets, Value v, const Stmt& s);
  Flow exec_for(const Stmt& s, std::string& out);

  // Expressions (jinja_eval_expr.cpp).
  Value eval(const Expr& e);
  Value eval_optional(const ExprPtr& e) { return e ? eval(*e) : Value::none(); }
  CallArgs eval_args(const Expr& e, std::size_t first);
  Value eval_inner(const Expr& e);
  Value eval_call(const Expr& e);
  Value call_macro(const Macro& macro, const CallArgs& a);
  Value eval_unary(const Expr& e);
  Value eval_binary(const Expr& e);
  Value eval_compare(const Expr& e);

  std::vector<Scope> scopes_;
  int call_depth_ = 0;
  RenderLimits limits_;
  std::uint64_t max_steps_ = 0;
  std::size_t max_output_ = 0;
  std::uint64_t steps_ = 0;
  std::uint64_t loop_steps_ = 0;
};

}  // namespace weft::jinja::detail
