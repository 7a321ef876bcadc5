// oneOf: a value must match exactly one branch. The grammar can only say "one of these", which
// is anyOf, so oneOf is generated only when no value can match two branches — checked here,
// conservatively, from what is decidable without solving schemas: branches of different JSON
// types, distinct enum/const values, or objects told apart by a required property with
// distinct const/enum values (a discriminator) or by a required property the other branch
// forbids (additionalProperties: false). Anything else is refused with the two branches named,
// rather than generating an output a validator would reject.

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "runtime/grammar/json_schema_converter.hpp"

namespace weft::grammar::detail {
namespace {

enum Kind : unsigned {
  kObject = 1,
  kArray = 2,
  kString = 4,
  kInteger = 8,
  kFraction = 16,  // numbers that are not integers
  kBoolean = 32,
  kNull = 64,
  kAny = 127,
};

// $ref chains and nesting followed at most this deep; beyond, a branch may be anything.
constexpr int kMaxDepth = 16;

unsigned kind_of_value(Json v) {
  switch (v.type()) {
    case simdjson::dom::element_type::OBJECT:
      return kObject;
    case simdjson::dom::element_type::ARRAY:
      return kArray;
    case simdjson::dom::element_type::STRING:
      return kString;
    case simdjson::dom::element_type::INT64:
    case simdjson::dom::element_type::UINT64:
      return kInteger;
    case simdjson::dom::element_type::DOUBLE: {
      const double d = double(v);
      return d == std::floor(d) ? kInteger : kFraction;
    }
    case simdjson::dom::element_type::BOOL:
      return kBoolean;
    case simdjson::dom::element_type::NULL_VALUE:
      return kNull;
  }
  return kAny;
}

// A value's text for equality: JSON compares 1 and 1.0 equal, so integral numbers print as
// integers.
std::string canonical(Json v) {
  if (v.type() == simdjson::dom::element_type::DOUBLE) {
    const double d = double(v);
    if (d == std::floor(d) && std::fabs(d) < 9e15) return std::to_string(static_cast<long long>(d));
  }
  return simdjson::minify(v);
}

unsigned kinds_of_type(std::string_view t) {
  if (t == "object") return kObject;
  if (t == "array") return kArray;
  if (t == "string") return kString;
  if (t == "integer") return kInteger;
  if (t == "number") return kInteger | kFraction;
  if (t == "boolean") return kBoolean;
  if (t == "null") return kNull;
  return kAny;
}

struct Summary {
  // The kinds of value the converter generates for it (`type`, or the type its keywords imply)
  // and the kinds a validator may accept (only `type`, enum and const say: a schema without
  // `type` accepts every value its keywords do not apply to, `{"maxLength":0}` any number).
  unsigned kinds = kAny;
  unsigned valid_kinds = kAny;
  std::optional<std::set<std::string>> values;  // the only values it matches, when known
  // Objects: required properties, with their values when known; declared properties; whether
  // other properties are forbidden.
  std::map<std::string, std::optional<std::set<std::string>>> required;
  std::set<std::string> declared;
  bool closed = false;
  // Strings: the lengths allowed (minLength/maxLength).
  double min_length = 0, max_length = INFINITY;
};

bool intersects(const std::set<std::string>& a, const std::set<std::string>& b) {
  return std::any_of(a.begin(), a.end(), [&](const std::string& x) { return b.count(x) > 0; });
}

}  // namespace

struct OneOfChecker {
  JsonSchemaConverter& c;

  Summary summarize(Json s, const std::string& path, int depth) {
    Summary out;
    if (depth > kMaxDepth || !s.is_object()) {
      if (s.is_bool() && !bool(s)) out.kinds = out.valid_kinds = 0;
      return out;
    }
    auto obj = s.get_object().value();
    std::string_view ref;
    if (!obj["$ref"].get(ref)) {
      auto target = c.resolve_ref(ref, path);
      if (!target) return out;
      return summarize(*target, std::string(ref), depth + 1);
    }
    Json v;
    if (!obj["const"].get(v)) {
      out.values = std::set<std::string>{canonical(v)};
      out.kinds = out.valid_kinds = kind_of_value(v);
      return out;
    }
    if (!obj["enum"].get(v) && v.is_array()) {
      out.values.emplace();
      out.kinds = 0;
      for (Json x : v.get_array()) {
        out.values->insert(canonical(x));
        out.kinds |= kind_of_value(x);
      }
      out.valid_kinds = out.kinds;
      return out;
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!obj[key].get(v) && v.is_array()) {
        out.kinds = out.valid_kinds = 0;
        out.values.emplace();
        for (Json b : v.get_array()) {
          Summary sb = summarize(b, path, depth + 1);
          out.kinds |= sb.kinds;
          out.valid_kinds |= sb.valid_kinds;
          if (sb.values && out.values) {
            out.values->insert(sb.values->begin(), sb.values->end());
          } else {
            out.values.reset();
          }
        }
        return out;
      }
    }
    if (!obj["type"].get(v)) {
      out.kinds = 0;
      if (v.is_string()) out.kinds = kinds_of_type(std::string_view(v));
      if (v.is_array()) {
        for (Json t : v.get_array())
          if (t.is_string()) out.kinds |= kinds_of_type(std::string_view(t));
      }
      out.valid_kinds = out.kinds;
    } else {
      // The converter's inference: keywords of one type make the schema that type.
      unsigned inferred = 0;
      auto has = [&](const char* k) { return !obj[k].get(v); };
      if (has("properties") || has("required") || has("additionalProperties") ||
          has("minProperties") || has("maxProperties"))
        inferred |= kObject;
      if (has("items") || has("prefixItems") || has("minItems") || has("maxItems") ||
          has("uniqueItems") || has("contains"))
        inferred |= kArray;
      if (has("minLength") || has("maxLength") || has("pattern") || has("format"))
        inferred |= kString;
      if (has("minimum") || has("maximum") || has("exclusiveMinimum") || has("exclusiveMaximum"))
        inferred |= kInteger | kFraction;
      if (inferred) out.kinds = inferred;
    }
    Json len;
    if (!obj["minLength"].get(len) && len.is_number()) out.min_length = double(len);
    if (!obj["maxLength"].get(len) && len.is_number()) out.max_length = double(len);
    // allOf: a value meets every branch, so its kinds are in each branch's; their required
    // properties apply too.
    Json all;
    std::vector<Summary> all_of;
    if (!obj["allOf"].get(all) && all.is_array()) {
      for (Json b : all.get_array()) {
        all_of.push_back(summarize(b, path, depth + 1));
        out.kinds &= all_of.back().kinds;
        out.valid_kinds &= all_of.back().valid_kinds;
      }
    }
    if (out.kinds & kObject) {
      Json props;
      // A default element has no document: test it only once "properties" was found.
      const bool have_props = !obj["properties"].get(props) && props.is_object();
      if (have_props) {
        for (auto [name, sub] : props.get_object())
          out.declared.emplace(name);
      }
      Json add;
      // Weft generates no undeclared property unless additionalProperties allows it, but a
      // validator accepts them: only an explicit false closes the object.
      out.closed = !obj["additionalProperties"].get(add) && add.is_bool() && !bool(add);
      Json req;
      if (!obj["required"].get(req) && req.is_array()) {
        for (Json r : req.get_array()) {
          if (!r.is_string()) continue;
          const std::string name{std::string_view(r)};
          std::optional<std::set<std::string>> values;
          Json sub;
          if (!have_props || props.get_object()[name].get(sub)) {
            out.required.emplace(name, std::nullopt);
            continue;
          }
          Summary ps = summarize(sub, path, depth + 1);
          out.required.emplace(name, ps.values);
        }
      }
    }
    for (const auto& sb : all_of)
      for (const auto& [name, values] : sb.required)
        out.required.emplace(name, values);
    return out;
  }

  // True when no value matches both.
  static bool disjoint(const Summary& a, const Summary& b) {
    // What one generates that the other may accept, both ways.
    const unsigned common = (a.kinds & b.valid_kinds) | (b.kinds & a.valid_kinds);
    if (common == 0) return true;
    if (a.values && b.values) return !intersects(*a.values, *b.values);
    // Only strings in common, of lengths that do not overlap.
    if ((common & ~unsigned{kString}) == 0 &&
        (a.max_length < b.min_length || b.max_length < a.min_length))
      return true;
    if (common != kObject) return false;
    // Both may be objects, and only objects: look for a property that tells them apart.
    for (const auto& [name, values] : a.required) {
      auto it = b.required.find(name);
      if (it != b.required.end() && values && it->second && !intersects(*values, *it->second)) {
        return true;
      }
      if (b.closed && !b.declared.count(name)) return true;
    }
    for (const auto& [name, values] : b.required) {
      if (a.closed && !a.declared.count(name)) return true;
    }
    return false;
  }
};

Result<void> JsonSchemaConverter::check_one_of(Json list, const std::string& path) {
  OneOfChecker checker{*this};
  std::vector<Summary> branches;
  std::size_t i = 0;
  for (Json sub : list.get_array()) {
    branches.push_back(checker.summarize(sub, path + "/" + std::to_string(i++), 0));
  }
  for (std::size_t a = 0; a < branches.size(); ++a) {
    for (std::size_t b = a + 1; b < branches.size(); ++b) {
      if (!OneOfChecker::disjoint(branches[a], branches[b])) {
        return error(path, "branches " + std::to_string(a) + " and " + std::to_string(b) +
                               " may both match one value, and oneOf allows exactly one; make "
                               "them exclusive (different types, distinct enum/const values, or "
                               "a required property with distinct const values) or use anyOf");
      }
    }
  }
  return {};
}

}  // namespace weft::grammar::detail
