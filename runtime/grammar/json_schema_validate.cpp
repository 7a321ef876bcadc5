// A small JSON Schema validator for values the converter must decide about while compiling:
// which enum/const values also meet their sibling keywords, which values a `not` excludes.
// It answers only where it is sure; nullopt (a keyword it does not check, a remote $ref) makes
// the converter refuse rather than guess.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/grammar/json_schema_converter.hpp"
#include "runtime/text/regex.hpp"

namespace weft::grammar::detail {
namespace {

bool is_number(Json v) {
  return v.is_int64() || v.is_uint64() || v.is_double();
}

std::size_t codepoints(std::string_view s) {
  std::size_t n = 0;
  for (unsigned char c : s)
    n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

std::optional<std::uint64_t> json_count(Json value) {
  if (!is_number(value)) return std::nullopt;
  const double d = double(value);
  if (!(d >= 0) || d != std::floor(d)) return std::nullopt;  // NaN, negative, a fraction
  constexpr double kMost = 9007199254740992.0;               // 2^53
  return static_cast<std::uint64_t>(std::min(d, kMost));
}

bool json_equal(Json a, Json b) {
  if (is_number(a) && is_number(b)) {
    if (a.is_double() || b.is_double()) return double(a) == double(b);
    if (a.is_int64() && b.is_int64()) return std::int64_t(a) == std::int64_t(b);
    if (a.is_uint64() && b.is_uint64()) return std::uint64_t(a) == std::uint64_t(b);
    return false;  // one negative int64, one uint64 beyond int64
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    auto x = a.get_array().value(), y = b.get_array().value();
    if (x.size() != y.size()) return false;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (!json_equal(x.at(i).value(), y.at(i).value())) return false;
    return true;
  }
  if (a.is_object()) {
    auto x = a.get_object().value(), y = b.get_object().value();
    if (x.size() != y.size()) return false;
    // A name given twice (JSON allows it, RFC 8259 only advises against it) is compared
    // occurrence by occurrence: the j-th value of a name in `a` with the j-th in `b`. A lookup
    // by name would find the first one for both and call an object unequal to itself.
    std::unordered_map<std::string_view, std::vector<Json>> in_b;
    for (auto [k, v] : y)
      in_b[k].push_back(v);
    std::unordered_map<std::string_view, std::size_t> seen;
    for (auto [k, v] : x) {
      auto it = in_b.find(k);
      std::size_t& j = seen[k];
      if (it == in_b.end() || j >= it->second.size() || !json_equal(v, it->second[j])) return false;
      ++j;
    }
    return true;
  }
  return simdjson::minify(a) == simdjson::minify(b);
}

std::optional<bool> JsonSchemaConverter::validate(Json v, Json s, int depth) {
  if (depth > 32) return std::nullopt;
  if (s.is_bool()) return bool(s);
  if (!s.is_object()) return std::nullopt;
  const std::string type = json_type_name(v);
  auto num = [&](Json x) { return double(x); };
  for (auto [key, k] : s.get_object()) {
    if (is_annotation(key) || key == "format") {
      // A format is checked only by what generates it; here it cannot be decided (unless the
      // value is not a string, which formats ignore).
      if (key == "format" && v.is_string()) return std::nullopt;
      continue;
    }
    bool ok = true;
    if (key == "type") {
      auto has_type = [&](std::string_view t) {
        return t == type || (t == "number" && type == "integer");
      };
      ok = false;
      if (k.is_string()) ok = has_type(std::string_view(k));
      if (k.is_array())
        for (Json t : k.get_array())
          ok = ok || (t.is_string() && has_type(std::string_view(t)));
    } else if (key == "enum") {
      ok = false;
      if (!k.is_array()) return std::nullopt;
      for (Json e : k.get_array())
        ok = ok || json_equal(v, e);
    } else if (key == "const") {
      ok = json_equal(v, k);
    } else if (key == "minimum" || key == "maximum" || key == "exclusiveMinimum" ||
               key == "exclusiveMaximum" || key == "multipleOf") {
      if (!is_number(v)) continue;
      if (!is_number(k)) return std::nullopt;
      const double x = num(v), b = num(k);
      if (key == "minimum") ok = x >= b;
      if (key == "maximum") ok = x <= b;
      if (key == "exclusiveMinimum") ok = x > b;
      if (key == "exclusiveMaximum") ok = x < b;
      if (key == "multipleOf") ok = b > 0 && std::fmod(x, b) == 0;
    } else if (key == "minLength" || key == "maxLength") {
      if (!v.is_string()) continue;
      const double n = static_cast<double>(codepoints(std::string_view(v)));
      if (!is_number(k)) return std::nullopt;  // (a string bound: found by fuzz_json_schema)
      ok = key == "minLength" ? n >= num(k) : n <= num(k);
    } else if (key == "pattern") {
      if (!v.is_string()) continue;
      if (!k.is_string()) return std::nullopt;
      // PCRE2 (the tokenizers' engine: compiled without recursion on the stack, with match
      // limits), not std::regex: libstdc++'s compiler overflows a signed integer on a long
      // back-reference number (`\\7777...`, found by fuzz_json_schema) and its matcher recurses
      // once per character. A pattern PCRE2 refuses or gives up on is not decided here.
      auto re = text::Regex::compile(std::string_view(k));
      if (!re) return std::nullopt;
      try {
        ok = re->search(std::string_view(v));
      } catch (const Error&) {
        return std::nullopt;
      }
    } else if (key == "minItems" || key == "maxItems") {
      if (!v.is_array()) continue;
      const double n = static_cast<double>(v.get_array().size());
      if (!is_number(k)) return std::nullopt;  // (a string bound: found by fuzz_json_schema)
      ok = key == "minItems" ? n >= num(k) : n <= num(k);
    } else if (key == "minProperties" || key == "maxProperties") {
      if (!v.is_object()) continue;
      const double n = static_cast<double>(v.get_object().size());
      if (!is_number(k)) return std::nullopt;  // (a string bound: found by fuzz_json_schema)
      ok = key == "minProperties" ? n >= num(k) : n <= num(k);
    } else if (key == "required") {
      if (!v.is_object()) continue;
      if (!k.is_array()) return std::nullopt;
      for (Json r : k.get_array()) {
        Json w;
        ok = ok && r.is_string() && !v.get_object().at_key(std::string_view(r)).get(w);
      }
    } else if (key == "properties" || key == "additionalProperties") {
      if (!v.is_object()) continue;
      Json props, extra;
      bool has_props = !s.get_object()["properties"].get(props) && props.is_object();
      bool has_extra = !s.get_object()["additionalProperties"].get(extra);
      if (key == "additionalProperties" && has_props) continue;  // checked with properties
      for (auto [name, value] : v.get_object()) {
        Json sub;
        bool declared = has_props && !props.get_object().at_key(name).get(sub);
        if (!declared && !has_extra) continue;
        auto r = validate(value, declared ? sub : extra, depth + 1);
        if (!r) return std::nullopt;
        ok = ok && *r;
      }
    } else if (key == "items" || key == "prefixItems") {
      if (!v.is_array()) continue;
      Json prefix, items;
      bool has_prefix = !s.get_object()["prefixItems"].get(prefix) && prefix.is_array();
      bool has_items = !s.get_object()["items"].get(items);
      if (key == "items" && has_prefix) continue;  // checked with prefixItems
      std::size_t i = 0;
      for (Json e : v.get_array()) {
        Json sub;
        bool in_prefix = has_prefix && !prefix.get_array().at(i).get(sub);
        ++i;
        if (!in_prefix && !has_items) continue;
        auto r = validate(e, in_prefix ? sub : items, depth + 1);
        if (!r) return std::nullopt;
        ok = ok && *r;
      }
    } else if (key == "uniqueItems") {
      if (!v.is_array() || !k.is_bool() || !bool(k)) continue;
      auto a = v.get_array().value();
      for (std::size_t i = 0; i < a.size(); ++i)
        for (std::size_t j = i + 1; j < a.size(); ++j)
          ok = ok && !json_equal(a.at(i).value(), a.at(j).value());
    } else if (key == "allOf" || key == "anyOf" || key == "oneOf") {
      if (!k.is_array()) return std::nullopt;
      std::size_t matched = 0, total = 0;
      for (Json b : k.get_array()) {
        auto r = validate(v, b, depth + 1);
        if (!r) return std::nullopt;
        matched += *r;
        ++total;
      }
      ok = key == "allOf" ? matched == total : key == "anyOf" ? matched > 0 : matched == 1;
    } else if (key == "not") {
      auto r = validate(v, k, depth + 1);
      if (!r) return std::nullopt;
      ok = !*r;
    } else if (key == "$ref") {
      if (!k.is_string()) return std::nullopt;
      auto target = resolve_ref(std::string_view(k), "#");
      if (!target) return std::nullopt;
      auto r = validate(v, *target, depth + 1);
      if (!r) return std::nullopt;
      ok = *r;
    } else {
      return std::nullopt;
    }
    if (!ok) return false;
  }
  return true;
}

}  // namespace weft::grammar::detail
