// Python's attribute, item and slice access, str and dict methods, and Jinja's globals, as
// the chat templates use them.

#include <algorithm>
#include <ctime>

#include "runtime/text/jinja_builtins.hpp"
#include "runtime/text/jinja_strings.hpp"

namespace weft::jinja {

void fail(std::string message) {
  throw RuntimeFailure{std::move(message), false};
}

Value CallArgs::get(std::size_t index, std::string_view name, const Value& fallback) const {
  if (index < args.size()) return args[index];
  for (const auto& [k, v] : kwargs) {
    if (k == name) return v;
  }
  return fallback;
}

void CallArgs::check(std::string_view function, std::size_t max_args,
                     std::initializer_list<std::string_view> names) const {
  if (args.size() > max_args) {
    fail(std::string(function) + "() takes at most " + std::to_string(max_args) +
         " positional arguments, " + std::to_string(args.size()) + " given");
  }
  for (const auto& [k, v] : kwargs) {
    if (std::find(names.begin(), names.end(), k) == names.end()) {
      fail(std::string(function) + "() got an unexpected keyword argument '" + k + "'");
    }
  }
}

std::int64_t to_index(const Value& v, std::string_view what) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool() ? 1 : 0;
  fail(std::string(what) + " must be an integer, not " + v.type_name());
}

namespace {

// Built with append: GCC 12 warns falsely (-Wrestrict) on `"'" + std::string`.
std::string quoted_type(const Value& v) {
  std::string out = "'";
  out.append(v.type_name()).append("'");
  return out;
}

[[noreturn]] void fail_undefined(const Value& v, std::string_view action) {
  std::string hint = v.undefined_hint().empty() ? "a value is undefined" : v.undefined_hint();
  fail(hint + " (while " + std::string(action) + ")");
}

std::string as_text(const Value& v, std::string_view what) {
  if (!v.is_string()) fail(std::string(what) + " must be a string, not " + v.type_name());
  return v.as_string();
}

std::optional<std::string> optional_text(const Value& v, std::string_view what) {
  if (v.is_none() || v.is_undefined()) return std::nullopt;
  return as_text(v, what);
}

// Python's slice.indices(): clamps start/stop for a sequence of `length` items.
void slice_indices(std::int64_t length, const Value& start_v, const Value& stop_v,
                   const Value& step_v, std::int64_t& start, std::int64_t& stop,
                   std::int64_t& step) {
  auto given = [](const Value& v) { return !v.is_none() && !v.is_undefined(); };
  step = given(step_v) ? to_index(step_v, "a slice step") : 1;
  if (step == 0) fail("slice step cannot be zero");
  std::int64_t lower = step < 0 ? -1 : 0;
  std::int64_t upper = step < 0 ? length - 1 : length;
  auto clamp = [&](const Value& v, std::int64_t fallback) {
    if (!given(v)) return fallback;
    std::int64_t i = to_index(v, "a slice index");
    if (i < 0) {
      i += length;
      if (i < lower) i = lower;
    } else if (i > upper) {
      i = upper;
    }
    return i;
  };
  start = clamp(start_v, step < 0 ? upper : lower);
  stop = clamp(stop_v, step < 0 ? lower : upper);
}

}  // namespace

Value get_attribute(const Value& target, std::string_view name) {
  if (target.is_undefined())
    fail_undefined(target, "reading attribute '" + std::string(name) + "'");
  if (target.is_dict() || target.is_namespace()) {
    if (const Value* v = target.as_dict().find(name)) return *v;
  }
  return Value::undefined(quoted_type(target) + " has no attribute '" + std::string(name) + "'");
}

Value get_item(const Value& target, const Value& key) {
  if (target.is_undefined()) fail_undefined(target, "reading an item");
  if (target.is_dict() || target.is_namespace()) {
    if (key.is_string()) {
      if (const Value* v = target.as_dict().find(key.as_string())) return *v;
    }
    return Value::undefined(quoted_type(target) + " has no attribute " + to_repr(key));
  }
  if ((target.is_list() || target.is_string()) && (key.is_int() || key.is_bool())) {
    std::int64_t i = to_index(key, "an index");
    if (target.is_list()) {
      auto n = static_cast<std::int64_t>(target.as_list().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return target.as_list()[static_cast<std::size_t>(i)];
    } else {
      std::vector<char32_t> cps = decode_utf8(target.as_string());
      auto n = static_cast<std::int64_t>(cps.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        std::string out;
        append_utf8(cps[static_cast<std::size_t>(i)], out);
        return Value(std::move(out));
      }
    }
  }
  return Value::undefined(quoted_type(target) + " has no element " + to_repr(key));
}

Value get_slice(const Value& target, const Value& start_v, const Value& stop_v,
                const Value& step_v) {
  if (target.is_undefined()) fail_undefined(target, "slicing");
  std::int64_t start, stop, step;
  if (target.is_list()) {
    const List& list = target.as_list();
    slice_indices(static_cast<std::int64_t>(list.size()), start_v, stop_v, step_v, start, stop,
                  step);
    List out;
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      out.push_back(list[static_cast<std::size_t>(i)]);
    }
    return Value(std::move(out));
  }
  if (target.is_string()) {
    std::vector<char32_t> cps = decode_utf8(target.as_string());
    slice_indices(static_cast<std::int64_t>(cps.size()), start_v, stop_v, step_v, start, stop,
                  step);
    std::string out;
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      append_utf8(cps[static_cast<std::size_t>(i)], out);
    }
    return Value(std::move(out));
  }
  return Value::undefined(quoted_type(target) + " cannot be sliced");
}

List iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return value.as_list();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& [k, v] : value.as_dict().items)
        keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      for (char32_t cp : decode_utf8(value.as_string())) {
        std::string s;
        append_utf8(cp, s);
        chars.emplace_back(std::move(s));
      }
      return chars;
    }
    default:
      fail("'" + value.type_name() + "' object is not iterable");
  }
}

bool contains(const Value& haystack, const Value& needle) {
  if (haystack.is_string()) {
    if (!needle.is_string()) {
      fail("'in <string>' requires string as left operand, not " + needle.type_name());
    }
    return haystack.as_string().find(needle.as_string()) != std::string::npos;
  }
  if (haystack.is_dict()) {
    return needle.is_string() && haystack.as_dict().find(needle.as_string()) != nullptr;
  }
  if (haystack.is_list()) {
    for (const Value& v : haystack.as_list()) {
      if (equals(v, needle)) return true;
    }
    return false;
  }
  if (haystack.is_undefined()) return false;
  fail("argument of type '" + haystack.type_name() + "' is not iterable");
}

namespace {

Value string_method(const std::string& s, std::string_view name, const CallArgs& a) {
  const Value none = Value::none();
  if (name == "startswith" || name == "endswith") {
    a.check(name, 1, {});
    Value arg = a.get(0, "", none);
    List options = arg.is_list() ? arg.as_list() : List{arg};
    for (const Value& o : options) {
      std::string p = as_text(o, std::string(name) + " argument");
      bool hit = name == "startswith"
                     ? s.compare(0, p.size(), p) == 0 && s.size() >= p.size()
                     : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
      if (hit) return Value(true);
    }
    return Value(false);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    a.check(name, 1, {});
    StripSide side = name == "strip"    ? StripSide::kBoth
                     : name == "lstrip" ? StripSide::kLeft
                                        : StripSide::kRight;
    return Value(py_strip(s, optional_text(a.get(0, "", none), "strip characters"), side));
  }
  if (name == "split") {
    a.check(name, 2, {"sep", "maxsplit"});
    auto sep = optional_text(a.get(0, "sep", none), "separator");
    if (sep && sep->empty()) fail("empty separator");
    std::int64_t maxsplit = to_index(a.get(1, "maxsplit", Value(-1)), "maxsplit");
    List parts;
    for (auto& p : py_split(s, sep, maxsplit))
      parts.emplace_back(std::move(p));
    return Value(std::move(parts));
  }
  if (name == "replace") {
    a.check(name, 3, {});
    if (a.args.size() < 2) fail("replace() takes at least 2 arguments");
    return Value(py_replace(s, as_text(a.args[0], "old"), as_text(a.args[1], "new"),
                            to_index(a.get(2, "", Value(-1)), "count")));
  }
  if (name == "upper") return Value(py_upper(s));
  if (name == "lower") return Value(py_lower(s));
  if (name == "title") return Value(py_title(s));
  if (name == "capitalize") return Value(py_capitalize(s));
  if (name == "find" || name == "count") {
    a.check(name, 1, {});
    std::string needle = as_text(a.get(0, "", none), std::string(name) + " argument");
    if (name == "find") {
      std::size_t hit = s.find(needle);
      return Value(hit == std::string::npos
                       ? std::int64_t{-1}
                       : static_cast<std::int64_t>(count_code_points(s.substr(0, hit))));
    }
    if (needle.empty()) return Value(static_cast<std::int64_t>(count_code_points(s) + 1));
    std::int64_t n = 0;
    for (std::size_t p = s.find(needle); p != std::string::npos;
         p = s.find(needle, p + needle.size()))
      ++n;
    return Value(n);
  }
  if (name == "join") {
    a.check(name, 1, {});
    std::string out;
    bool first = true;
    for (const Value& v : iterate(a.get(0, "", none))) {
      if (!first) out += s;
      first = false;
      out += as_text(v, "join item");
    }
    return Value(std::move(out));
  }
  if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum") {
    if (s.empty()) return Value(false);
    for (char32_t cp : decode_utf8(s)) {
      bool ok = name == "isspace"   ? is_python_space(cp)
                : name == "isdigit" ? (cp >= '0' && cp <= '9')
                : name == "isalpha"
                    ? ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z')
                    : ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') || (cp >= '0' && cp <= '9');
      if (!ok) return Value(false);
    }
    return Value(true);
  }
  fail("'str' object has no method '" + std::string(name) + "'");
}

Value dict_method(const Dict& d, std::string_view name, const CallArgs& a) {
  if (name == "items") {
    List out;
    for (const auto& [k, v] : d.items)
      out.push_back(Value::tuple(List{Value(k), v}));
    return Value(std::move(out));
  }
  if (name == "keys" || name == "values") {
    List out;
    for (const auto& [k, v] : d.items)
      out.push_back(name == "keys" ? Value(k) : v);
    return Value(std::move(out));
  }
  if (name == "get") {
    a.check(name, 2, {});
    const Value none = Value::none();
    Value key = a.get(0, "", none);
    if (key.is_string()) {
      if (const Value* v = d.find(key.as_string())) return *v;
    }
    return a.get(1, "", none);
  }
  fail("'dict' object has no method '" + std::string(name) + "'");
}

}  // namespace

Value call_method(const Value& target, std::string_view name, const CallArgs& args) {
  if (target.is_undefined()) fail_undefined(target, "calling '" + std::string(name) + "'");
  if (target.is_string()) return string_method(target.as_string(), name, args);
  if (target.is_dict()) {
    // A dict key holding a callable cannot come from JSON, so `d.name(...)` is a method.
    return dict_method(target.as_dict(), name, args);
  }
  fail("'" + target.type_name() + "' object has no method '" + std::string(name) + "'");
}

bool call_global(std::string_view name, const CallArgs& a, Value& result) {
  if (name == "raise_exception") {
    const Value none = Value::none();
    throw RuntimeFailure{to_str(a.get(0, "message", none)), true};
  }
  if (name == "namespace" || name == "dict") {
    Dict d;
    if (!a.args.empty()) {
      if (a.args.size() > 1 || !a.args[0].is_dict())
        fail(std::string(name) + "() takes a dict or keyword arguments");
      d = a.args[0].as_dict();
    }
    for (const auto& [k, v] : a.kwargs)
      d.set(k, v);
    result = name == "namespace" ? Value::make_namespace(std::move(d)) : Value(std::move(d));
    return true;
  }
  if (name == "range") {
    a.check(name, 3, {});
    if (a.args.empty()) fail("range() takes at least 1 argument");
    std::int64_t start = 0, stop, step = 1;
    if (a.args.size() == 1) {
      stop = to_index(a.args[0], "range() argument");
    } else {
      start = to_index(a.args[0], "range() argument");
      stop = to_index(a.args[1], "range() argument");
      if (a.args.size() == 3) step = to_index(a.args[2], "range() argument");
    }
    if (step == 0) fail("range() arg 3 must not be zero");
    // Jinja's sandbox caps ranges at MAX_RANGE = 100000 items.
    List out;
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() >= 100000) fail("range too big, the limit is 100000 items");
      out.emplace_back(i);
    }
    result = Value(std::move(out));
    return true;
  }
  if (name == "strftime_now") {
    a.check(name, 1, {});
    const Value none = Value::none();
    std::string format = as_text(a.get(0, "", none), "strftime_now() format");
    std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[512];
    std::size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &local);
    result = Value(std::string(buf, n));
    return true;
  }
  return false;
}

}  // namespace weft::jinja
