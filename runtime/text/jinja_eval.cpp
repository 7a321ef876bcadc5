#include "runtime/text/jinja_eval.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <unordered_map>

#include "runtime/text/jinja_builtins.hpp"
#include "runtime/text/jinja_parser.hpp"
#include "runtime/text/jinja_scope.hpp"

namespace weft::jinja {
namespace {

// Bounds that keep a hostile template from exhausting the stack or memory; the work and the
// output are bounded by RenderLimits.
constexpr int kMaxCallDepth = 100;
constexpr std::size_t kMaxListItems = std::size_t{16} << 20;
constexpr std::uint32_t kMaxValueDepth = 128;

// The bytes of the strings in `v` (keys included), plus a few per other value: what the step
// and output limits grow by.
std::uint64_t input_bytes(const Value& v, int depth = 0) {
  if (depth > 130) return 0;
  if (v.is_string()) return v.as_string().size();
  std::uint64_t n = 8;
  if (v.is_list()) {
    for (const Value& item : v.as_list())
      n += input_bytes(item, depth + 1);
  } else if (v.is_dict()) {
    for (const auto& [k, item] : v.as_dict().items)
      n += k.size() + input_bytes(item, depth + 1);
  }
  return n;
}

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

// Whether `v` holds a namespace anywhere: a namespace stored into a namespace could make a
// cycle, which printing would follow forever.
bool holds_namespace(const Value& v) {
  if (v.is_namespace()) return true;
  if (v.is_list()) {
    for (const Value& item : v.as_list()) {
      if (holds_namespace(item)) return true;
    }
  } else if (v.is_dict()) {
    for (const auto& item : v.as_dict().items) {
      if (holds_namespace(item.second)) return true;
    }
  }
  return false;
}

struct LocatedFailure {
  int line;
  int column;
  std::string message;
  bool raised;
};

enum class Flow { kNormal, kBreak, kContinue };

class Evaluator {
 public:
  Evaluator(const Dict& variables, const RenderLimits& limits) : limits_(limits) {
    scopes_.emplace_back();
    std::uint64_t in = 0;
    for (const auto& [k, v] : variables.items) {
      scopes_.back()[k] = v;
      in += k.size() + input_bytes(v);
    }
    const std::uint64_t extra = in * limits.per_input_byte;
    max_steps_ = limits.max_steps + extra;
    max_output_ = limits.max_output_bytes + extra;
  }

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

  Flow exec_body(const Body& body, std::string& out) {
    for (const StmtPtr& s : body) {
      Flow flow = exec(*s, out);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  void append(std::string& out, std::string_view text, const Stmt& s) {
    if (out.size() + text.size() > max_output_) {
      fail_at(s.line, s.column, "the rendered text exceeds " + limit_text(max_output_, "bytes"));
    }
    out += text;
  }

  // "N bytes (the limit: B plus P per byte of the variables given)".
  std::string limit_text(std::uint64_t limit, const char* unit) const {
    const std::uint64_t base = limit == max_output_ ? limits_.max_output_bytes : limits_.max_steps;
    return std::to_string(limit) + " " + unit + " (" + std::to_string(base) + " plus " +
           std::to_string(limits_.per_input_byte) +
           " per byte of the messages and other variables)";
  }

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

  Flow exec(const Stmt& s, std::string& out) {
    try {
      step();
    } catch (const RuntimeFailure& f) {
      fail_at(s.line, s.column, f.message);
    }
    switch (s.kind) {
      case Stmt::Kind::kText:
        append(out, s.text, s);
        return Flow::kNormal;
      case Stmt::Kind::kOutput:
        append(out, to_str(eval(*s.expr)), s);
        return Flow::kNormal;
      case Stmt::Kind::kIf:
        return exec_body(eval(*s.expr).truthy() ? s.body : s.else_body, out);
      case Stmt::Kind::kFor:
        return exec_for(s, out);
      case Stmt::Kind::kSet: {
        Value v = eval(*s.expr);
        assign(s, std::move(v));
        return Flow::kNormal;
      }
      case Stmt::Kind::kSetBlock: {
        std::string captured;
        exec_body(s.body, captured);
        scopes_.back()[s.targets[0]] = Value(std::move(captured));
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro:
        scopes_.back()[s.text] = Value(std::make_shared<const Macro>(Macro{&s}));
        return Flow::kNormal;
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
      case Stmt::Kind::kGeneration:
        return exec_body(s.body, out);
    }
    return Flow::kNormal;
  }

  void assign(const Stmt& s, Value v) {
    if (s.set_attribute) {
      const Value* ns = lookup(s.targets[0]);
      if (ns == nullptr || !ns->is_namespace()) {
        fail_at(s.line, s.column,
                "cannot assign attribute '" + s.targets[1] + "' on '" + s.targets[0] +
                    "', which is not a namespace()");
      }
      if (holds_namespace(v)) {
        fail_at(s.line, s.column, "a namespace() cannot hold a namespace()");
      }
      ns->namespace_dict().set(s.targets[1], std::move(v));
      return;
    }
    bind(s.targets, std::move(v), s);
  }

  void bind(const std::vector<std::string>& targets, Value v, const Stmt& s) {
    if (targets.size() == 1) {
      scopes_.back()[targets[0]] = std::move(v);
      return;
    }
    if (!v.is_list() || v.as_list().size() != targets.size()) {
      fail_at(
          s.line, s.column,
          "cannot unpack " + v.type_name() + " into " + std::to_string(targets.size()) + " names");
    }
    List items = v.as_list();
    for (std::size_t i = 0; i < targets.size(); ++i)
      scopes_.back()[targets[i]] = items[i];
  }

  Flow exec_for(const Stmt& s, std::string& out) {
    Value iterable = eval(*s.expr);
    List items;
    try {
      items = iterate(iterable);
    } catch (const RuntimeFailure& f) {
      fail_at(s.expr->line, s.expr->column, f.message);
    }
    if (s.filter) {
      // `for x in xs if cond`: the condition sees each item bound; loop.length counts
      // only the items that pass.
      List kept;
      for (Value& item : items) {
        scopes_.emplace_back();
        bind(s.targets, item, s);
        bool pass = eval(*s.filter).truthy();
        scopes_.pop_back();
        if (pass) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec_body(s.else_body, out);
    auto n = static_cast<std::int64_t>(items.size());
    for (std::int64_t i = 0; i < n; ++i) {
      // Nine distinct names: appended as they are (Dict::set would compare each with those
      // already there), in one allocation; this runs once per iteration of every loop.
      Dict loop;
      loop.items.reserve(9);
      loop.items.emplace_back("index0", Value(i));
      loop.items.emplace_back("index", Value(i + 1));
      loop.items.emplace_back("revindex0", Value(n - i - 1));
      loop.items.emplace_back("revindex", Value(n - i));
      loop.items.emplace_back("first", Value(i == 0));
      loop.items.emplace_back("last", Value(i == n - 1));
      loop.items.emplace_back("length", Value(n));
      loop.items.emplace_back("previtem", i > 0 ? items[static_cast<std::size_t>(i - 1)]
                                                : Value::undefined("there is no previous item"));
      loop.items.emplace_back("nextitem", i + 1 < n ? items[static_cast<std::size_t>(i + 1)]
                                                    : Value::undefined("there is no next item"));
      try {
        loop_step();
      } catch (const RuntimeFailure& f) {
        fail_at(s.line, s.column, f.message);
      }
      scopes_.emplace_back();
      scopes_.back()["loop"] = Value(std::move(loop));
      bind(s.targets, items[static_cast<std::size_t>(i)], s);
      Flow flow = exec_body(s.body, out);
      scopes_.pop_back();
      if (flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Value eval(const Expr& e) {
    try {
      step();
      Value v = eval_inner(e);
      if (v.depth() > kMaxValueDepth) fail("values nest deeper than 128 levels");
      return v;
    } catch (const RuntimeFailure& f) {
      throw LocatedFailure{e.line, e.column, f.message, f.raised};
    }
  }

  Value eval_optional(const ExprPtr& e) { return e ? eval(*e) : Value::none(); }

  CallArgs eval_args(const Expr& e, std::size_t first) {
    CallArgs a;
    for (std::size_t i = first; i < e.args.size(); ++i)
      a.args.push_back(eval(*e.args[i]));
    for (const auto& [k, v] : e.kwargs)
      a.kwargs.emplace_back(k, eval(*v));
    return a;
  }

  Value eval_inner(const Expr& e) {
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

  Value eval_call(const Expr& e) {
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

  Value call_macro(const Macro& macro, const CallArgs& a) {
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

  Value eval_unary(const Expr& e) {
    Value v = eval(*e.args[0]);
    if (e.name == "not") return Value(!v.truthy());
    if (v.is_undefined()) fail(v.undefined_hint());
    if (!v.is_number()) fail("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
    if (e.name == "+") return v.is_bool() ? Value(std::int64_t{v.as_bool()}) : v;
    if (v.is_float()) return Value(-v.as_float());
    return Value(-to_index(v, "operand"));
  }

  Value eval_binary(const Expr& e) {
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
        fail(seq.is_string()
                 ? "the repeated string would exceed " + limit_text(max_output_, "bytes")
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

  Value eval_compare(const Expr& e) {
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

  std::vector<Scope> scopes_;
  int call_depth_ = 0;
  RenderLimits limits_;
  std::uint64_t max_steps_ = 0;
  std::size_t max_output_ = 0;
  std::uint64_t steps_ = 0;
  std::uint64_t loop_steps_ = 0;
};

}  // namespace

Result<Template> Template::parse(std::string_view source, std::string source_name,
                                 const LexOptions& options) {
  auto tokens = tokenize(source, source_name, options);
  if (!tokens) return tokens.error();
  auto body = jinja::parse(tokens.value(), source_name);
  if (!body) return body.error();
  return Template(std::move(source_name), std::make_shared<const Body>(std::move(body).value()));
}

Result<std::string> Template::render(const Dict& variables, const RenderLimits& limits) const {
  try {
    return Evaluator(variables, limits).run(*body_);
  } catch (const LocatedFailure& f) {
    std::string where =
        source_name_ + ":" + std::to_string(f.line) + ":" + std::to_string(f.column);
    if (f.raised) {
      return Error(ErrorCode::kInvalidArgument, where + ": raise_exception: " + f.message);
    }
    return Error(ErrorCode::kInvalidArgument, where + ": " + f.message);
  } catch (const RuntimeFailure& f) {
    return Error(ErrorCode::kInvalidArgument, source_name_ + ": " + f.message);
  } catch (const std::bad_alloc&) {
    return Error(ErrorCode::kResourceExhausted, source_name_ + ": out of memory while rendering");
  } catch (const std::exception& e) {
    // A bug, not bad input; reported rather than let through so a request never crashes.
    return Error(ErrorCode::kInternal,
                 source_name_ + ": internal error while rendering: " + e.what());
  }
}

}  // namespace weft::jinja
