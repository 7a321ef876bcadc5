#pragma once
// The value model of the Jinja subset that chat templates use. It follows Python's objects as
// Jinja sees them (str, int, float, bool, None, list, dict, Undefined, namespace), because
// transformers renders templates with Python's Jinja and the output must match byte for byte:
// str() and json.dumps() formatting, truthiness, equality and ordering all follow Python.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace weft::jinja {

class Value;
struct Macro;  // a {% macro %} bound to its definition; see jinja_eval.hpp

using List = std::vector<Value>;

// A Python dict with string keys; keeps insertion order as Python does (tojson prints it).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;

  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(std::string key, Value value);
};

// Jinja's Undefined: what a missing variable, attribute or item evaluates to. `hint` says what
// was missing, for the error raised when an undefined value is used in an operation.
struct Undefined {
  std::string hint;
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kMacro
  };

  Value() : data_(Undefined{}) {}
  static Value undefined(std::string hint) { return Value(Undefined{std::move(hint)}); }
  static Value none() { return Value(nullptr); }
  Value(bool b) : data_(b) {}                            // NOLINT
  Value(std::int64_t i) : data_(i) {}                    // NOLINT
  Value(int i) : data_(static_cast<std::int64_t>(i)) {}  // NOLINT
  Value(double d) : data_(d) {}                          // NOLINT
  Value(std::string s) : data_(std::move(s)) {}          // NOLINT
  Value(const char* s) : data_(std::string(s)) {}        // NOLINT
  Value(List list);                                      // NOLINT: implicit
  Value(Dict dict);                                      // NOLINT: implicit
  explicit Value(std::shared_ptr<const Macro> macro) : data_(std::move(macro)) {}
  // A Python tuple: a list that prints as "(a, b)"; tuples come from literals and items().
  static Value tuple(List items) {
    Value v(std::move(items));
    v.tuple_ = true;
    return v;
  }
  // A namespace() object: a dict whose attributes `{% set ns.x = ... %}` may change.
  static Value make_namespace(Dict dict);

  Kind kind() const;
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_tuple() const { return tuple_; }
  // How deeply lists and dicts nest inside this value (0 for a scalar). The evaluator bounds
  // it, so that printing, comparing and destroying values cannot exhaust the stack.
  std::uint32_t depth() const { return depth_; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_namespace() const { return kind() == Kind::kNamespace; }
  bool is_macro() const { return kind() == Kind::kMacro; }

  bool as_bool() const { return std::get<bool>(data_); }
  std::int64_t as_int() const { return std::get<std::int64_t>(data_); }
  double as_float() const { return std::get<double>(data_); }
  // An int, a bool (Python's bool is an int) or a float, as a double.
  double as_double() const;
  const std::string& as_string() const { return std::get<std::string>(data_); }
  const List& as_list() const { return *std::get<std::shared_ptr<List>>(data_); }
  // The dict of a dict or of a namespace.
  const Dict& as_dict() const;
  Dict& namespace_dict() const { return *std::get<NamespacePtr>(data_).dict; }
  const Macro& as_macro() const { return *std::get<std::shared_ptr<const Macro>>(data_); }
  const std::string& undefined_hint() const { return std::get<Undefined>(data_).hint; }

  // Python's bool(value).
  bool truthy() const;
  // Python's type name, as Jinja's error messages print it ("str", "dict object", ...).
  std::string type_name() const;

 private:
  struct NamespacePtr {
    std::shared_ptr<Dict> dict;
  };
  explicit Value(Undefined u) : data_(std::move(u)) {}
  explicit Value(std::nullptr_t) : data_(nullptr) {}

  std::variant<Undefined, std::nullptr_t, bool, std::int64_t, double, std::string,
               std::shared_ptr<List>, std::shared_ptr<Dict>, NamespacePtr,
               std::shared_ptr<const Macro>>
      data_;
  bool tuple_ = false;
  std::uint32_t depth_ = 0;
};

// Python's str(value): what `{{ value }}` prints ("" for undefined, "None", "True", "1.5",
// "['a', 1]", "{'k': 'v'}").
std::string to_str(const Value& value);
// Python's repr(value).
std::string to_repr(const Value& value);
// Python's repr(float): the shortest string that reads back the same double.
std::string float_repr(double d);

struct JsonOptions {
  std::optional<int> indent;  // json.dumps(indent=...); none: one line with ", " and ": "
  bool sort_keys = false;
};
// json.dumps(value, ensure_ascii=False, ...) as transformers' `tojson` filter calls it. Fails
// (nullopt, with `error` set) on values JSON cannot hold: undefined, namespaces, macros.
std::optional<std::string> to_json(const Value& value, const JsonOptions& options,
                                   std::string& error);

// Python's ==, and the order of <, for the types where Python defines one (numbers with
// numbers, str with str, list with list). `comparable` is set false where Python raises.
bool equals(const Value& a, const Value& b);
int compare(const Value& a, const Value& b, bool& comparable);

}  // namespace weft::jinja
