// Jinja's filters and tests, with transformers' tojson (json.dumps, ensure_ascii=False).

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "runtime/text/jinja_builtins.hpp"
#include "runtime/text/jinja_parser.hpp"
#include "runtime/text/jinja_strings.hpp"

namespace weft::jinja {
namespace {

constexpr std::string_view kFilters[] = {
    "abs",     "attr",   "capitalize", "count",  "d",          "default", "e",          "escape",
    "first",   "float",  "indent",     "int",    "items",      "join",    "last",       "length",
    "list",    "lower",  "map",        "max",    "min",        "reject",  "rejectattr", "replace",
    "reverse", "round",  "safe",       "select", "selectattr", "sort",    "string",     "sum",
    "title",   "tojson", "trim",       "unique", "upper"};

constexpr std::string_view kTests[] = {
    "defined",     "undefined", "none",    "boolean",  "true",     "false",    "integer", "float",
    "number",      "string",    "mapping", "iterable", "sequence", "callable", "odd",     "even",
    "divisibleby", "eq",        "equalto", "ne",       "lt",       "lessthan", "le",      "gt",
    "greaterthan", "ge",        "in",      "lower",    "upper",    "sameas"};

const Value kNone = Value::none();

std::size_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return count_code_points(v.as_string());
    case Value::Kind::kList:
      return v.as_list().size();
    case Value::Kind::kDict:
    case Value::Kind::kNamespace:
      return v.as_dict().items.size();
    default:
      fail("object of type '" + v.type_name() + "' has no len()");
  }
}

// Jinja's make_attrgetter: "a.b.0" walks attributes and integer items.
Value attribute_path(const Value& item, const Value& path) {
  if (path.is_int()) return get_item(item, path);
  std::string p = to_str(path);
  Value v = item;
  std::size_t start = 0;
  while (true) {
    std::size_t dot = p.find('.', start);
    std::string part = p.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    v = digits ? get_item(v, Value(static_cast<std::int64_t>(std::stoll(part))))
               : get_attribute(v, part);
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

std::string case_key(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? py_lower(v.as_string()) : std::string();
}

bool less_than(const Value& a, const Value& b, bool case_sensitive) {
  bool comparable = true;
  int c = !case_sensitive && a.is_string() && b.is_string()
              ? compare(Value(py_lower(a.as_string())), Value(py_lower(b.as_string())), comparable)
              : compare(a, b, comparable);
  if (!comparable) {
    fail("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() +
         "'");
  }
  return c < 0;
}

// select/reject and selectattr/rejectattr: `test_args` starts with the test name, if any.
Value select_items(const Value& target, const CallArgs& a, bool by_attribute, bool keep) {
  std::size_t first = by_attribute ? 1 : 0;
  if (by_attribute && a.args.empty()) fail("selectattr/rejectattr need an attribute name");
  std::string test = a.args.size() > first ? to_str(a.args[first]) : "";
  if (!test.empty() && !is_known_test(test)) fail("no test named '" + test + "'");
  CallArgs test_args;
  for (std::size_t i = first + 1; i < a.args.size(); ++i)
    test_args.args.push_back(a.args[i]);
  List out;
  for (const Value& item : iterate(target)) {
    Value subject = by_attribute ? attribute_path(item, a.args[0]) : item;
    bool pass = test.empty() ? subject.truthy() : apply_test(test, subject, test_args);
    if (pass == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

Value indent(const std::string& s, const CallArgs& a) {
  a.check("indent", 3, {"width", "first", "blank"});
  Value width = a.get(0, "width", Value(4));
  std::int64_t n = width.is_string() ? 0 : to_index(width, "indent width");
  if (n > 1024) fail("indent width is larger than 1024");
  std::string pad = width.is_string()
                        ? width.as_string()
                        : std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, n)), ' ');
  bool first = a.get(1, "first", Value(false)).truthy();
  bool blank = a.get(2, "blank", Value(false)).truthy();
  std::vector<std::string> lines;
  std::string text = s + "\n";
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t nl = text.find('\n', start);
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  std::string out = lines.empty() ? "" : lines[0];
  for (std::size_t i = 1; i < lines.size(); ++i) {
    out += "\n";
    if (blank || !lines[i].empty()) out += pad;
    out += lines[i];
  }
  if (first) out = pad + out;
  return Value(std::move(out));
}

// Python's int() of a float truncates toward zero into an integer of any size; Weft's integers
// are 64-bit, so a magnitude beyond them is an error (converting it would be undefined behaviour).
Value float_to_int(double d) {
  if (!(d > -9223372036854775808.0 && d < 9223372036854775808.0)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", d);
    fail(std::string("int: ") + buf + " does not fit in a 64-bit integer");
  }
  return Value(static_cast<std::int64_t>(d));
}

Value to_int(const Value& v, const CallArgs& a) {
  Value fallback = a.get(0, "default", Value(0));
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(std::int64_t{v.as_bool()});
  if (v.is_float()) {
    if (!std::isfinite(v.as_float())) return fallback;
    return float_to_int(v.as_float());
  }
  if (v.is_string()) {
    std::string s = py_strip(v.as_string(), std::nullopt, StripSide::kBoth);
    std::int64_t base = to_index(a.get(1, "base", Value(10)), "base");
    char* end = nullptr;
    errno = 0;
    long long i = std::strtoll(s.c_str(), &end, static_cast<int>(base));
    if (!s.empty() && end == s.c_str() + s.size() && errno == 0)
      return Value(static_cast<std::int64_t>(i));
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(d)) return float_to_int(d);
  }
  return fallback;
}

}  // namespace

bool is_known_filter(std::string_view name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}

bool is_known_test(std::string_view name) {
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

Value apply_filter(std::string_view name, const Value& v, const CallArgs& a) {
  if (name == "tojson") {
    a.check(name, 1, {"indent", "sort_keys", "ensure_ascii"});
    JsonOptions options;
    Value indent_v = a.get(0, "indent", kNone);
    if (!indent_v.is_none()) {
      std::int64_t indent_width = to_index(indent_v, "indent");
      // A bound, so that a hostile indent cannot exhaust memory.
      if (indent_width > 1024) fail("tojson indent is larger than 1024");
      options.indent = static_cast<int>(std::max<std::int64_t>(indent_width, -1));
    }
    options.sort_keys = a.get(99, "sort_keys", Value(false)).truthy();
    if (a.get(99, "ensure_ascii", Value(false)).truthy())
      fail("tojson(ensure_ascii=true) is not supported");
    std::string error;
    auto json = to_json(v, options, error);
    if (!json) fail(error);
    return Value(std::move(*json));
  }
  if (name == "trim") {
    a.check(name, 1, {"chars"});
    Value chars = a.get(0, "chars", kNone);
    return Value(py_strip(to_str(v), chars.is_none() ? std::nullopt : std::optional(to_str(chars)),
                          StripSide::kBoth));
  }
  if (name == "length" || name == "count") return Value(static_cast<std::int64_t>(length_of(v)));
  if (name == "string") return Value(to_str(v));
  if (name == "upper") return Value(py_upper(to_str(v)));
  if (name == "lower") return Value(py_lower(to_str(v)));
  if (name == "title") return Value(jinja_title(to_str(v)));
  if (name == "capitalize") return Value(py_capitalize(to_str(v)));
  if (name == "safe") return v;
  if (name == "e" || name == "escape") return Value(html_escape(to_str(v)));
  if (name == "default" || name == "d") {
    a.check(name, 2, {"default_value", "boolean"});
    bool boolean = a.get(1, "boolean", Value(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return a.get(0, "default_value", Value(""));
    return v;
  }
  if (name == "items") {
    if (v.is_undefined()) return Value(List{});
    if (!v.is_dict()) fail("items filter needs a mapping, got " + v.type_name());
    return call_method(v, "items", {});
  }
  if (name == "first" || name == "last") {
    List items = iterate(v);
    if (items.empty())
      return Value::undefined("no " + std::string(name) + " item, the sequence was empty");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    a.check(name, 2, {"d", "attribute"});
    std::string sep = to_str(a.get(0, "d", Value("")));
    Value attribute = a.get(1, "attribute", kNone);
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      if (!first) out += sep;
      first = false;
      out += to_str(attribute.is_none() ? item : attribute_path(item, attribute));
    }
    return Value(std::move(out));
  }
  if (name == "replace") {
    a.check(name, 3, {"old", "new", "count"});
    Value count = a.get(2, "count", kNone);
    return Value(py_replace(to_str(v), to_str(a.get(0, "old", kNone)),
                            to_str(a.get(1, "new", kNone)),
                            count.is_none() ? -1 : to_index(count, "count")));
  }
  if (name == "list") return Value(iterate(v));
  if (name == "reverse") {
    if (v.is_string()) return get_slice(v, kNone, kNone, Value(-1));
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "int") return to_int(v, a);
  if (name == "float") {
    if (v.is_number()) return Value(v.as_double());
    if (v.is_string()) {
      std::string s = py_strip(v.as_string(), std::nullopt, StripSide::kBoth);
      char* end = nullptr;
      double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size()) return Value(d);
    }
    return a.get(0, "default", Value(0.0));
  }
  if (name == "abs") {
    if (v.is_int()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
    if (v.is_number()) return Value(std::fabs(v.as_double()));
    fail("bad operand type for abs(): '" + v.type_name() + "'");
  }
  if (name == "round") {
    a.check(name, 2, {"precision", "method"});
    if (!v.is_number()) fail("round needs a number, got " + v.type_name());
    double scale =
        std::pow(10.0, static_cast<double>(to_index(a.get(0, "precision", Value(0)), "precision")));
    std::string method = to_str(a.get(1, "method", Value("common")));
    double x = v.as_double() * scale;
    // Python's round() rounds halves to even, as nearbyint does in the default rounding mode.
    double r = method == "floor"  ? std::floor(x)
               : method == "ceil" ? std::ceil(x)
                                  : std::nearbyint(x);
    if (method != "common" && method != "floor" && method != "ceil")
      fail("method must be common, ceil or floor");
    return Value(r / scale);
  }
  if (name == "attr") return get_attribute(v, to_str(a.get(0, "name", kNone)));
  if (name == "map") {
    List out;
    Value attribute = a.get(99, "attribute", kNone);
    if (!attribute.is_none()) {
      Value fallback = a.get(99, "default", Value());
      for (const Value& item : iterate(v)) {
        Value got = attribute_path(item, attribute);
        out.push_back(got.is_undefined() && !fallback.is_undefined() ? fallback : got);
      }
      return Value(std::move(out));
    }
    if (a.args.empty()) fail("map() needs a filter name or attribute=");
    std::string filter = to_str(a.args[0]);
    if (!is_known_filter(filter) || filter == "map") fail("no filter named '" + filter + "'");
    CallArgs rest{List(a.args.begin() + 1, a.args.end()), a.kwargs};
    for (const Value& item : iterate(v))
      out.push_back(apply_filter(filter, item, rest));
    return Value(std::move(out));
  }
  if (name == "select" || name == "reject") return select_items(v, a, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") {
    return select_items(v, a, true, name == "selectattr");
  }
  if (name == "sort" || name == "unique" || name == "min" || name == "max") {
    bool case_sensitive = a.get(99, "case_sensitive", Value(false)).truthy();
    Value attribute = a.get(99, "attribute", kNone);
    auto key = [&](const Value& item) {
      return attribute.is_none() ? item : attribute_path(item, attribute);
    };
    List items = iterate(v);
    if (name == "sort") {
      bool reverse = a.get(0, "reverse", Value(false)).truthy();
      std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        return reverse ? less_than(key(y), key(x), case_sensitive)
                       : less_than(key(x), key(y), case_sensitive);
      });
      return Value(std::move(items));
    }
    if (name == "unique") {
      List out;
      std::vector<Value> seen;
      for (const Value& item : items) {
        Value k = key(item);
        if (!case_sensitive && k.is_string()) k = Value(case_key(k, false));
        bool dup =
            std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); });
        if (!dup) {
          seen.push_back(k);
          out.push_back(item);
        }
      }
      return Value(std::move(out));
    }
    if (items.empty())
      return Value::undefined("no " + std::string(name) + " item, the sequence was empty");
    Value best = items[0];
    for (const Value& item : items) {
      if (name == "min" ? less_than(key(item), key(best), case_sensitive)
                        : less_than(key(best), key(item), case_sensitive)) {
        best = item;
      }
    }
    return best;
  }
  if (name == "sum") {
    Value attribute = a.get(0, "attribute", kNone);
    Value total = a.get(1, "start", Value(0));
    for (const Value& item : iterate(v)) {
      Value x = attribute.is_none() ? item : attribute_path(item, attribute);
      if (!x.is_number() || !total.is_number()) fail("sum() needs numbers, got " + x.type_name());
      if (x.is_float() || total.is_float()) {
        total = Value(total.as_double() + x.as_double());
      } else {
        std::int64_t r;
        if (__builtin_add_overflow(to_index(total, "sum"), to_index(x, "sum"), &r))
          fail("integer overflow in sum()");
        total = Value(r);
      }
    }
    return total;
  }
  if (name == "indent") return indent(to_str(v), a);
  fail("no filter named '" + std::string(name) + "'");
}

bool apply_test(std::string_view name, const Value& v, const CallArgs& a) {
  Value arg = a.get(0, "", kNone);
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "sequence") return v.is_string() || v.is_list() || v.is_dict();
  if (name == "callable") return v.is_macro();
  if (name == "odd" || name == "even") {
    std::int64_t i = to_index(v, "odd/even operand");
    return (i % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    std::int64_t d = to_index(arg, "divisibleby argument");
    if (d == 0) fail("integer division or modulo by zero");
    return to_index(v, "divisibleby operand") % d == 0;
  }
  if (name == "eq" || name == "equalto") return equals(v, arg);
  if (name == "ne") return !equals(v, arg);
  if (name == "lt" || name == "lessthan" || name == "le" || name == "gt" || name == "greaterthan" ||
      name == "ge") {
    bool comparable = true;
    int c = compare(v, arg, comparable);
    if (!comparable) fail("cannot compare " + v.type_name() + " with " + arg.type_name());
    if (name == "lt" || name == "lessthan") return c < 0;
    if (name == "le") return c <= 0;
    if (name == "gt" || name == "greaterthan") return c > 0;
    return c >= 0;
  }
  if (name == "in") return contains(arg, v);
  if (name == "lower" || name == "upper") {
    std::string s = to_str(v);
    bool cased = false;
    for (char c : s) {
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) cased = true;
      if (name == "lower" ? (c >= 'A' && c <= 'Z') : (c >= 'a' && c <= 'z')) return false;
    }
    return cased;
  }
  if (name == "sameas") {
    if (v.is_none() || arg.is_none()) return v.is_none() && arg.is_none();
    if (v.is_bool() && arg.is_bool()) return v.as_bool() == arg.as_bool();
    return false;
  }
  fail("no test named '" + std::string(name) + "'");
}

}  // namespace weft::jinja
