#include "runtime/text/jinja_eval.hpp"

#include <cstdint>
#include <new>
#include <stdexcept>

#include "runtime/text/jinja_evaluator.hpp"
#include "runtime/text/jinja_parser.hpp"

namespace weft::jinja {
namespace detail {
namespace {

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

}  // namespace

Evaluator::Evaluator(const Dict& variables, const RenderLimits& limits) : limits_(limits) {
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

Flow Evaluator::exec_body(const Body& body, std::string& out) {
  for (const StmtPtr& s : body) {
    Flow flow = exec(*s, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

void Evaluator::append(std::string& out, std::string_view text, const Stmt& s) {
  if (out.size() + text.size() > max_output_) {
    fail_at(s.line, s.column, "the rendered text exceeds " + limit_text(max_output_, "bytes"));
  }
  out += text;
}

// "N bytes (the limit: B plus P per byte of the variables given)".
std::string Evaluator::limit_text(std::uint64_t limit, const char* unit) const {
  const std::uint64_t base = limit == max_output_ ? limits_.max_output_bytes : limits_.max_steps;
  return std::to_string(limit) + " " + unit + " (" + std::to_string(base) + " plus " +
         std::to_string(limits_.per_input_byte) + " per byte of the messages and other variables)";
}

Flow Evaluator::exec(const Stmt& s, std::string& out) {
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

void Evaluator::assign(const Stmt& s, Value v) {
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

void Evaluator::bind(const std::vector<std::string>& targets, Value v, const Stmt& s) {
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

Flow Evaluator::exec_for(const Stmt& s, std::string& out) {
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

}  // namespace detail

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
    return detail::Evaluator(variables, limits).run(*body_);
  } catch (const detail::LocatedFailure& f) {
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
