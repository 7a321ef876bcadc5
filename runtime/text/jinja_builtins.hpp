#pragma once
// The built-in operations the evaluator calls: filters and tests (jinja_filters.cpp), and
// Python's attribute, item and slice access and str/dict methods (jinja_methods.cpp).
// They report failure by throwing RuntimeFailure; the evaluator adds the line and column of
// the expression that called them and turns it into a weft::Error.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/text/jinja_value.hpp"

namespace weft::jinja {

struct RuntimeFailure {
  std::string message;
  bool raised = false;  // from the template's own raise_exception()
};

[[noreturn]] void fail(std::string message);

struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;

  // Argument `index` by position, or by keyword `name`; `fallback` when neither is given.
  // Returned by value, so that a temporary fallback cannot dangle.
  Value get(std::size_t index, std::string_view name, const Value& fallback) const;
  // Fails on more positional arguments than `max_args` or a keyword not in `names`.
  void check(std::string_view function, std::size_t max_args,
             std::initializer_list<std::string_view> names) const;
};

Value apply_filter(std::string_view name, const Value& target, const CallArgs& args);
bool apply_test(std::string_view name, const Value& target, const CallArgs& args);

// Jinja's getattr/getitem: a missing attribute, key or index gives an undefined value;
// only access on an undefined value fails.
Value get_attribute(const Value& target, std::string_view name);
Value get_item(const Value& target, const Value& key);
Value get_slice(const Value& target, const Value& start, const Value& stop, const Value& step);
// `target.name(args)` for Python's str and dict methods; fails on an unknown method.
Value call_method(const Value& target, std::string_view name, const CallArgs& args);
// range(), namespace(), dict(), raise_exception(), strftime_now(); false when `name` is none.
bool call_global(std::string_view name, const CallArgs& args, Value& result);

// What `for x in value` iterates: list items, dict keys, string characters; undefined
// iterates as empty.
List iterate(const Value& value);
// Python's `needle in haystack`.
bool contains(const Value& haystack, const Value& needle);
// The exact int of an int or bool; fails otherwise.
std::int64_t to_index(const Value& v, std::string_view what);

}  // namespace weft::jinja
