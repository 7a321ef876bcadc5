#pragma once
// The syntax tree of a parsed template: expressions and statements, each with the line and
// column of its first token for error messages.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/text/jinja_value.hpp"

namespace weft::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kConst,      // constant
    kName,       // name
    kAttr,       // args[0].name
    kItem,       // args[0][args[1]]
    kSlice,      // args[0][args[1]:args[2]:args[3]], missing parts null
    kCall,       // args[0](args[1..], kwargs)
    kFilter,     // args[0] | name(args[1..], kwargs)
    kTest,       // args[0] is [not] name(args[1..])
    kUnary,      // name in {"-", "+", "not"} applied to args[0]
    kBinary,     // args[0] name args[1]; name is an arithmetic operator, "~", "and", "or"
    kCompare,    // args[0] ops[0] args[1] ops[1] args[2] ...
    kCondition,  // args[1] if args[0] else args[2] (args[2] may be null)
    kList,       // [args...]
    kTuple,      // (args...)
    kDict,       // {args[0]: args[1], args[2]: args[3], ...}
  };

  Kind kind = Kind::kConst;
  int line = 0;
  int column = 0;
  std::string name;
  Value constant;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // if expr: body else else_body (elif nests an kIf in else_body)
    kFor,       // for targets in expr [if filter]: body else else_body
    kSet,       // set targets = expr; targets {"ns", "attr"} with set_attribute for ns.attr
    kSetBlock,  // set targets[0] %} body {% endset
    kMacro,     // macro name(params = defaults): body
    kBreak,
    kContinue,
    kGeneration,  // transformers' {% generation %} marker: renders its body unchanged
  };

  Kind kind = Kind::kText;
  int line = 0;
  int column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;
  bool set_attribute = false;
  Body body;
  Body else_body;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // one per param, null where it has none
};

}  // namespace weft::jinja
