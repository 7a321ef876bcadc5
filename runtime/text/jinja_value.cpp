#include "runtime/text/jinja_value.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "runtime/text/jinja_strings.hpp"

namespace weft::jinja {

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value* Dict::find(std::string_view key) {
  for (auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(std::string key, Value value) {
  if (Value* existing = find(key)) {
    *existing = std::move(value);
  } else {
    items.emplace_back(std::move(key), std::move(value));
  }
}

Value::Value(List list) {
  std::uint32_t deepest = 0;
  for (const Value& item : list)
    deepest = std::max(deepest, item.depth_);
  depth_ = deepest + 1;
  data_ = std::make_shared<List>(std::move(list));
}

Value::Value(Dict dict) {
  std::uint32_t deepest = 0;
  for (const auto& item : dict.items)
    deepest = std::max(deepest, item.second.depth_);
  depth_ = deepest + 1;
  data_ = std::make_shared<Dict>(std::move(dict));
}

Value Value::make_namespace(Dict dict) {
  Value v(std::move(dict));
  v.data_ =
      NamespacePtr{std::make_shared<Dict>(std::move(*std::get<std::shared_ptr<Dict>>(v.data_)))};
  return v;
}

Value::Kind Value::kind() const {
  return static_cast<Kind>(data_.index());
}

double Value::as_double() const {
  switch (kind()) {
    case Kind::kBool:
      return as_bool() ? 1.0 : 0.0;
    case Kind::kInt:
      return static_cast<double>(as_int());
    default:
      return as_float();
  }
}

const Dict& Value::as_dict() const {
  if (is_namespace()) return *std::get<NamespacePtr>(data_).dict;
  return *std::get<std::shared_ptr<Dict>>(data_);
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return as_float() != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
      return !as_list().empty();
    case Kind::kDict:
      return !as_dict().items.empty();
    case Kind::kNamespace:
    case Kind::kMacro:
      return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list object";
    case Kind::kDict:
      return "dict object";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kMacro:
      return "Macro";
  }
  return "object";
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits in scientific form, then Python's layout rule: positional
  // when -4 <= exponent < 16, scientific otherwise (float_repr_style 'short', format 'r').
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  std::size_t e = sci.find('e');
  int exponent = std::atoi(sci.c_str() + e + 1);
  std::string digits;
  for (std::size_t i = 0; i < e; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  while (digits.size() > 1 && digits.back() == '0')
    digits.pop_back();
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<std::size_t>(exponent) + 1 >= digits.size()) {
      out += digits + std::string(exponent + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1, std::string::npos);
    }
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp;
  }
  return out;
}

namespace {

std::string string_repr(const std::string& s) {
  // Python prefers single quotes, and switches to double quotes when the text holds a single
  // quote and no double quote.
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c == static_cast<unsigned char>(quote)) {
          out += '\\';
          out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7f) {
          char hex[8];
          std::snprintf(hex, sizeof(hex), "\\x%02x", c);
          out += hex;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += quote;
  return out;
}

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char hex[8];
          std::snprintf(hex, sizeof(hex), "\\u%04x", c);
          out += hex;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

bool json_value(const Value& v, const JsonOptions& opt, int level, std::string& out,
                std::string& error) {
  auto newline = [&](int lvl) {
    out += '\n';
    // Python indents by ' ' * indent, which is empty for a negative indent.
    out.append(static_cast<std::size_t>(std::max(0, *opt.indent)) * static_cast<std::size_t>(lvl),
               ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return true;
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return true;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return true;
    case Value::Kind::kFloat: {
      double d = v.as_float();
      if (std::isnan(d)) {
        out += "NaN";
      } else if (std::isinf(d)) {
        out += d > 0 ? "Infinity" : "-Infinity";
      } else {
        out += float_repr(d);
      }
      return true;
    }
    case Value::Kind::kString:
      json_string(v.as_string(), out);
      return true;
    case Value::Kind::kList: {
      const List& list = v.as_list();
      if (list.empty()) {
        out += "[]";
        return true;
      }
      out += '[';
      for (std::size_t i = 0; i < list.size(); ++i) {
        if (i > 0) out += opt.indent ? "," : ", ";
        if (opt.indent) newline(level + 1);
        if (!json_value(list[i], opt, level + 1, out, error)) return false;
      }
      if (opt.indent) newline(level);
      out += ']';
      return true;
    }
    case Value::Kind::kDict: {
      const Dict& dict = v.as_dict();
      if (dict.items.empty()) {
        out += "{}";
        return true;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : dict.items)
        items.push_back(&item);
      if (opt.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      out += '{';
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += opt.indent ? "," : ", ";
        if (opt.indent) newline(level + 1);
        json_string(items[i]->first, out);
        out += ": ";
        if (!json_value(items[i]->second, opt, level + 1, out, error)) return false;
      }
      if (opt.indent) newline(level);
      out += '}';
      return true;
    }
    default:
      error = "Object of type " + v.type_name() + " is not JSON serializable";
      return false;
  }
}

}  // namespace

std::string to_repr(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kString:
      return string_repr(value.as_string());
    case Value::Kind::kList: {
      std::string out = value.is_tuple() ? "(" : "[";
      const List& list = value.as_list();
      for (std::size_t i = 0; i < list.size(); ++i) {
        if (i > 0) out += ", ";
        out += to_repr(list[i]);
      }
      if (value.is_tuple()) return out + (list.size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Value::Kind::kDict: {
      std::string out = "{";
      const Dict& dict = value.as_dict();
      for (std::size_t i = 0; i < dict.items.size(); ++i) {
        if (i > 0) out += ", ";
        out += string_repr(dict.items[i].first) + ": " + to_repr(dict.items[i].second);
      }
      return out + "}";
    }
    default:
      return to_str(value);
  }
}

std::string to_str(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return value.as_bool() ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(value.as_int());
    case Value::Kind::kFloat:
      return float_repr(value.as_float());
    case Value::Kind::kString:
      return value.as_string();
    case Value::Kind::kList:
    case Value::Kind::kDict:
      return to_repr(value);
    case Value::Kind::kNamespace:
      return "<Namespace " + to_repr(Value(value.as_dict())) + ">";
    case Value::Kind::kMacro:
      return "<Macro>";
  }
  return "";
}

std::optional<std::string> to_json(const Value& value, const JsonOptions& options,
                                   std::string& error) {
  std::string out;
  if (!json_value(value, options, 0, out, error)) return std::nullopt;
  return out;
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    auto as_i = [](const Value& v) { return v.is_bool() ? std::int64_t{v.as_bool()} : v.as_int(); };
    return as_i(a) == as_i(b);
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (!equals(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.find(k);
        if (other == nullptr || !equals(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.namespace_dict() == &b.namespace_dict();
    case Value::Kind::kMacro:
      return &a.as_macro() == &b.as_macro();
    default:
      return false;
  }
}

int compare(const Value& a, const Value& b, bool& comparable) {
  comparable = true;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    auto as_i = [](const Value& v) { return v.is_bool() ? std::int64_t{v.as_bool()} : v.as_int(); };
    std::int64_t x = as_i(a), y = as_i(b);
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    // UTF-8 byte order is code point order, which is Python's str order.
    int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return compare(x[i], y[i], comparable);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  comparable = false;
  return 0;
}

}  // namespace weft::jinja
