// Expressions of a template (Evaluator, jinja_evaluator.hpp): names, attributes and items,
// calls of filters, tests, methods, globals and macros, and the operators.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "runtime/text/jinja_evaluator.hpp"

namespace weft::jinja::detail {
namespace {

// Bounds that keep a hostile template from exhausting the stack or memory; the work and the
// output are bounded by RenderLimits.
constexpr int kMaxCallDepth = 100;
constexpr std::size_t kMaxListItems = std::size_t{16} << 20;
constexpr std::uint32_t kMaxValueDepth = 128;

// What a filter or method call is charged for its target: one step per value in it, nested
// ones included, and per 64 bytes of its strings (`tojson`, `join`, `map` and the like walk
// their target once; `messages | tojson` in a loop cost tens of microseconds an iteration
// under ASan when a list counted as one step per item). Those that look at a few items only are
// not charged: `messages | length` in a loop over the messages is common, and linear.
bool walks_its_target(const std::string& name) {
  return name != "length" && name != "count" && name != "first" && name != "last" &&
         name != "default" && name != "d" && name != "get";
}
std::uint64_t size_steps(const Value& v, int depth = 0) {
  if (v.is_string()) return 1 + v.as_string().size() / 64;
  std::uint64_t n = 1;
  if (depth > 130) return n;
  if (v.is_list()) {
    for (const Value& item : v.as_list())
      n += size_steps(item, depth + 1);
  } else if (v.is_dict()) {
    for (const auto& [k, item] : v.as_dict().items)
      n += size_steps(item, depth + 1);
  }
  return n;
}

}  // namespace

Value Evaluator::eval(const Expr& e) {
  try {
    step();
    Value v = eval_inner(e);
    if (v.depth() > kMaxValueDepth) fail("values nest deeper than 128 levels");
    return v;
  } catch (const RuntimeFailure& f) {
    throw LocatedFailure{e.line, e.column, f.message, f.raised};
  }
}

CallArgs Evaluator::eval_args(const Expr& e, std::size_t first) {
  CallArgs a;
  for (std::size_t i = first; i < e.args.size(); ++i)
    a.args.push_back(eval(*e.args[i]));
  for (const auto& [k, v] : e.kwargs)
    a.kwargs.emplace_back(k, eval(*v));
  return a;
}

Value Evaluator::eval_inner(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kConst:
      return e.constant;
    case Expr::Kind::kName: {
      const Value* v = lookup(e.name);
      return v ? *v : Value::undefined("'" + e.name + "' is undefined");
    }
    case Expr::Kind::kAttr:
      return get_attribute(eval(*e.args[0]), e.name);
    case Expr::Kind::kItem:
      return get_item(eval(*e.args[0]), eval(*e.args[1]));
    case Expr::Kind::kSlice:
      return get_slice(eval(*e.args[0]), eval_optional(e.args[1]), eval_optional(e.args[2]),
                       eval_optional(e.args[3]));
    case Expr::Kind::kCall:
      return eval_call(e);
    case Expr::Kind::kFilter: {
      Value target = eval(*e.args[0]);
      if (walks_its_target(e.name)) step(size_steps(target));
      return apply_filter(e.name, target, eval_args(e, 1));
    }
    case Expr::Kind::kTest: {
      Value target = eval(*e.args[0]);
      return Value(apply_test(e.name, target, eval_args(e, 1)) != e.negated);
    }
    case Expr::Kind::kUnary:
      return eval_unary(e);
    case Expr::Kind::kBinary:
      return eval_binary(e);
    case Expr::Kind::kCompare:
      return eval_compare(e);
    case Expr::Kind::kCondition:
      if (eval(*e.args[0]).truthy()) return eval(*e.args[1]);
      return e.args[2] ? eval(*e.args[2])
                       : Value::undefined("the condition was false and has no else");
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      List items;
      for (const ExprPtr& item : e.args)
        items.push_back(eval(*item));
      return e.kind == Expr::Kind::kTuple ? Value::tuple(std::move(items))
                                          : Value(std::move(items));
    }
    case Expr::Kind::kDict: {
      Dict d;
      for (std::size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value key = eval(*e.args[i]);
        if (!key.is_string()) fail("dict keys must be strings here, not " + key.type_name());
        d.set(key.as_string(), eval(*e.args[i + 1]));
      }
      return Value(std::move(d));
    }
  }
  fail("unknown expression");
}

Value Evaluator::eval_call(const Expr& e) {
  const Expr& callee = *e.args[0];
  if (callee.kind == Expr::Kind::kAttr) {
    Value target = eval(*callee.args[0]);
    if (target.is_dict() || target.is_namespace()) {
      const Value* member = target.as_dict().find(callee.name);
      if (member && member->is_macro()) return call_macro(member->as_macro(), eval_args(e, 1));
    }
    if (target.is_namespace()) fail("'Namespace' object has no method '" + callee.name + "'");
    if (walks_its_target(callee.name)) step(size_steps(target));
    return call_method(target, callee.name, eval_args(e, 1));
  }
  if (callee.kind == Expr::Kind::kName) {
    const Value* v = lookup(callee.name);
    if (v != nullptr && v->is_macro()) return call_macro(v->as_macro(), eval_args(e, 1));
    if (v != nullptr) fail("'" + callee.name + "' (" + v->type_name() + ") is not callable");
    Value result;
    if (call_global(callee.name, eval_args(e, 1), result)) return result;
    fail("'" + callee.name + "' is undefined");
  }
  Value target = eval(callee);
  if (!target.is_macro()) fail("'" + target.type_name() + "' object is not callable");
  return call_macro(target.as_macro(), eval_args(e, 1));
}

Value Evaluator::call_macro(const Macro& macro, const CallArgs& a) {
  const Stmt& def = *macro.definition;
  if (a.args.size() > def.params.size()) {
    fail("macro '" + def.text + "' takes at most " + std::to_string(def.params.size()) +
         " arguments, " + std::to_string(a.args.size()) + " given");
  }
  loop_step();
  if (++call_depth_ > kMaxCallDepth) fail("macro calls nest deeper than 100");
  scopes_.emplace_back();
  for (std::size_t i = 0; i < def.params.size(); ++i) {
    const Value* given = i < a.args.size() ? &a.args[i] : nullptr;
    for (const auto& [k, v] : a.kwargs) {
      if (k == def.params[i]) given = &v;
    }
    scopes_.back()[def.params[i]] =
        given ? *given
        : def.defaults[i]
            ? eval(*def.defaults[i])
            : Value::undefined("macro argument '" + def.params[i] + "' was not given");
  }
  for (const auto& [k, v] : a.kwargs) {
    if (std::find(def.params.begin(), def.params.end(), k) == def.params.end()) {
      scopes_.pop_back();
      --call_depth_;
      fail("macro '" + def.text + "' has no argument named '" + k + "'");
    }
  }
  std::string out;
  exec_body(def.body, out);
  scopes_.pop_back();
  --call_depth_;
  return Value(std::move(out));
}

Value Evaluator::eval_unary(const Expr& e) {
  Value v = eval(*e.args[0]);
  if (e.name == "not") return Value(!v.truthy());
  if (v.is_undefined()) fail(v.undefined_hint());
  if (!v.is_number()) fail("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
  if (e.name == "+") return v.is_bool() ? Value(std::int64_t{v.as_bool()}) : v;
  if (v.is_float()) return Value(-v.as_float());
  return Value(-to_index(v, "operand"));
}

Value Evaluator::eval_binary(const Expr& e) {
  const std::string& op = e.name;
  if (op == "and" || op == "or") {
    Value l = eval(*e.args[0]);
    if ((op == "and") != l.truthy()) return l;
    return eval(*e.args[1]);
  }
  Value l = eval(*e.args[0]);
  Value r = eval(*e.args[1]);
  if (op == "~") return Value(bounded(to_str(l) + to_str(r)));
  if (l.is_undefined()) fail(l.undefined_hint());
  if (r.is_undefined()) fail(r.undefined_hint());
  auto unsupported = [&]() -> Value {
    fail("unsupported operand type(s) for " + op + ": '" + l.type_name() + "' and '" +
         r.type_name() + "'");
  };
  if (op == "+") {
    if (l.is_string() && r.is_string()) return Value(bounded(l.as_string() + r.as_string()));
    if (l.is_list() && r.is_list()) {
      if (l.as_list().size() + r.as_list().size() > kMaxListItems) {
        fail("a list would grow beyond 16M items");
      }
      List out = l.as_list();
      out.insert(out.end(), r.as_list().begin(), r.as_list().end());
      return Value(std::move(out));
    }
  }
  if (op == "*" && (l.is_string() || l.is_list() || r.is_string() || r.is_list())) {
    const Value& seq = l.is_string() || l.is_list() ? l : r;
    const Value& count = l.is_string() || l.is_list() ? r : l;
    if (!count.is_int() && !count.is_bool()) return unsupported();
    std::int64_t n = to_index(count, "repeat count");
    const std::size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list().size();
    if (n > 0 && unit > 0 &&
        static_cast<std::uint64_t>(n) > (seq.is_string() ? max_output_ : kMaxListItems) / unit) {
      fail(seq.is_string() ? "the repeated string would exceed " + limit_text(max_output_, "bytes")
                           : std::string("the repeated list would exceed 16M items"));
    }
    if (seq.is_string()) {
      std::string out;
      for (std::int64_t i = 0; i < n; ++i)
        out += seq.as_string();
      return Value(std::move(out));
    }
    List out;
    for (std::int64_t i = 0; i < n; ++i)
      out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
    return Value(std::move(out));
  }
  if (!l.is_number() || !r.is_number()) return unsupported();
  if (op == "/") {
    if (r.as_double() == 0.0) fail("division by zero");
    return Value(l.as_double() / r.as_double());
  }
  if (l.is_float() || r.is_float() || (op == "**" && to_index(r, "exponent") < 0)) {
    double x = l.as_double(), y = r.as_double();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "**") return Value(std::pow(x, y));
    if (y == 0.0) fail("float division by zero");
    if (op == "//") return Value(std::floor(x / y));
    double m = std::fmod(x, y);
    if (m != 0.0 && ((m < 0) != (y < 0))) m += y;
    return Value(m);
  }
  std::int64_t x = to_index(l, "operand"), y = to_index(r, "operand"), out = 0;
  bool overflow = false;
  if (op == "+") {
    overflow = __builtin_add_overflow(x, y, &out);
  } else if (op == "-") {
    overflow = __builtin_sub_overflow(x, y, &out);
  } else if (op == "*") {
    overflow = __builtin_mul_overflow(x, y, &out);
  } else if (op == "**") {
    out = 1;
    for (std::int64_t i = 0; i < y && !overflow; ++i)
      overflow = __builtin_mul_overflow(out, x, &out);
  } else {
    if (y == 0) fail("integer division or modulo by zero");
    if (x == INT64_MIN && y == -1) fail("integer overflow");
    std::int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) {
      --q;
      m += y;
    }
    out = op == "//" ? q : m;
  }
  if (overflow) fail("integer overflow in '" + op + "' (Weft's integers are 64-bit)");
  return Value(out);
}

Value Evaluator::eval_compare(const Expr& e) {
  Value left = eval(*e.args[0]);
  for (std::size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.args[i + 1]);
    const std::string& op = e.ops[i];
    bool result;
    if (op == "==") {
      result = equals(left, right);
    } else if (op == "!=") {
      result = !equals(left, right);
    } else if (op == "in" || op == "notin") {
      result = contains(right, left) == (op == "in");
    } else {
      if (left.is_undefined()) fail(left.undefined_hint());
      if (right.is_undefined()) fail(right.undefined_hint());
      bool comparable = true;
      int c = compare(left, right, comparable);
      if (!comparable) {
        fail("'" + op + "' not supported between instances of '" + left.type_name() + "' and '" +
             right.type_name() + "'");
      }
      result = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
    }
    if (!result) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

}  // namespace weft::jinja::detail
