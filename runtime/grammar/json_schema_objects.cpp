// Objects: properties in the schema's order, required ones always present, optional ones
// skippable, and additionalProperties; allOf over object schemas, merged soundly.

#include <algorithm>
#include <set>

#include "runtime/grammar/json_schema_converter.hpp"

namespace weft::grammar::detail {
namespace {

struct ObjectSpec {
  std::vector<std::pair<std::string, Json>> properties;  // schema order
  std::set<std::string> required;
  enum class Extra { kNone, kAny, kSchema } extra = Extra::kNone;
  Json extra_schema;
};

std::string json_key(std::string_view name) {
  std::string out = "\"";
  for (unsigned char c : name) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

const std::set<std::string_view> kObjectKeywords{"type", "properties", "required",
                                                 "additionalProperties"};

}  // namespace

static Result<ObjectSpec> read_object_spec(JsonSchemaConverter& c, Json s,
                                           const std::string& path) {
  ObjectSpec spec;
  auto obj = s.get_object().value();
  Json v;
  if (!obj["properties"].get(v)) {
    if (!v.is_object()) return c.error(path + "/properties", "properties must be an object");
    for (auto [key, value] : v.get_object())
      spec.properties.emplace_back(std::string(key), value);
  }
  if (!obj["required"].get(v)) {
    if (!v.is_array()) return c.error(path + "/required", "required must be an array of names");
    for (Json r : v.get_array()) {
      if (!r.is_string()) return c.error(path + "/required", "required must be an array of names");
      spec.required.emplace(std::string_view(r));
    }
  }
  if (!obj["additionalProperties"].get(v)) {
    if (v.is_bool()) {
      spec.extra = bool(v) ? ObjectSpec::Extra::kAny : ObjectSpec::Extra::kNone;
    } else if (v.is_object()) {
      spec.extra = ObjectSpec::Extra::kSchema;
      spec.extra_schema = v;
    } else {
      return c.error(path + "/additionalProperties",
                     "additionalProperties must be a boolean or a schema");
    }
  }
  return spec;
}

static Result<ExprId> emit_object(JsonSchemaConverter& c, ObjectSpec spec, const std::string& path,
                                  int depth) {
  Grammar& g = c.g_;
  std::set<std::string> any_value_names;
  for (const auto& name : spec.required) {
    bool declared = std::any_of(spec.properties.begin(), spec.properties.end(),
                                [&](auto& p) { return p.first == name; });
    if (declared) continue;
    if (spec.extra == ObjectSpec::Extra::kNone)
      return c.error(path, "required property '" + name +
                               "' is not among the properties and no additional properties are "
                               "allowed, so nothing matches");
    if (spec.extra == ObjectSpec::Extra::kAny) any_value_names.insert(name);
    spec.properties.emplace_back(name, spec.extra_schema);
  }
  std::vector<ExprId> members;
  std::vector<bool> required;
  for (const auto& [name, schema] : spec.properties) {
    ExprId value;
    if (any_value_names.count(name)) {
      value = g.ref(c.any_value());
    } else {
      auto r = c.schema_rule(schema, path + "/properties/" + name, depth + 1);
      if (!r) return r.error();
      value = g.ref(*r);
    }
    members.push_back(g.sequence({c.token(json_key(name)), c.colon(), value}));
    required.push_back(spec.required.count(name) > 0);
  }
  std::optional<ExprId> extra;
  if (spec.extra != ObjectSpec::Extra::kNone) {
    ExprId value = g.ref(c.any_value());
    if (spec.extra == ObjectSpec::Extra::kSchema) {
      auto r = c.schema_rule(spec.extra_schema, path + "/additionalProperties", depth + 1);
      if (!r) return r.error();
      value = g.ref(*r);
    }
    extra = g.sequence({g.ref(c.any_string()), c.colon(), value});
  }
  // first(i): members i.. when nothing has been written yet; after(i): when something has, so
  // each member is preceded by a comma. Both are linear in the number of properties.
  const std::size_t n = members.size();
  RuleId after_next = c.new_rule("obj_after");
  RuleId first_next = c.new_rule("obj_first");
  if (extra) {
    ExprId more = g.star(g.sequence({c.comma(), *extra}));
    g.set_body(after_next, more);
    g.set_body(first_next, g.optional(g.sequence({*extra, more})));
  } else {
    g.set_body(after_next, g.empty());
    g.set_body(first_next, g.empty());
  }
  for (std::size_t i = n; i-- > 0;) {
    RuleId after = c.new_rule("obj_after");
    RuleId first = c.new_rule("obj_first");
    ExprId with = g.sequence({c.comma(), members[i], g.ref(after_next)});
    ExprId first_with = g.sequence({members[i], g.ref(after_next)});
    if (required[i]) {
      g.set_body(after, with);
      g.set_body(first, first_with);
    } else {
      g.set_body(after, g.choice({with, g.ref(after_next)}));
      g.set_body(first, g.choice({first_with, g.ref(first_next)}));
    }
    after_next = after;
    first_next = first;
  }
  return g.sequence({g.byte('{'), c.ws(), g.ref(first_next), c.ws(), g.byte('}')});
}

Result<ExprId> JsonSchemaConverter::object_schema(Json s, const std::string& path, int depth) {
  auto spec = read_object_spec(*this, s, path);
  if (!spec) return spec.error();
  return emit_object(*this, std::move(*spec), path, depth);
}

// allOf is sound to merge when every branch is an object schema: the result must satisfy
// each branch's properties and required lists, and a branch with additionalProperties false
// limits the names to its own properties. Anything else is refused rather than approximated.
Result<ExprId> JsonSchemaConverter::all_of(Json s, const std::string& path, int depth) {
  std::vector<std::pair<Json, std::string>> branches;
  Json list = s.get_object()["allOf"].value();
  if (!list.is_array()) return error(path + "/allOf", "allOf must be an array");
  std::size_t i = 0;
  for (Json b : list.get_array()) {
    std::string bpath = path + "/allOf/" + std::to_string(i++);
    // Follow $ref chains (bounded: a cycle of references is refused).
    for (int hops = 0; b.is_object(); ++hops) {
      std::string_view ref;
      if (b.get_object()["$ref"].get(ref)) break;
      if (hops > 32) return error(bpath, "$ref chain too long or cyclic");
      auto t = resolve_ref(ref, bpath);
      if (!t) return t.error();
      b = *t;
      bpath = std::string(ref);
    }
    branches.emplace_back(b, bpath);
  }
  if (branches.empty()) return error(path + "/allOf", "allOf is empty");
  std::vector<std::string> siblings;
  for (auto [key, value] : s.get_object())
    if (key != "allOf" && !is_annotation(key)) siblings.emplace_back(key);
  if (branches.size() == 1 && siblings.empty())
    return schema(branches[0].first, branches[0].second, depth + 1);
  branches.emplace_back(s, path);

  ObjectSpec merged;
  std::vector<std::vector<Json>> schemas;
  std::optional<std::set<std::string>>
      allowed;  // names allowed by additionalProperties:false branches
  for (auto& [b, bpath] : branches) {
    if (!b.is_object()) return error(bpath, "allOf is supported only over object schemas");
    for (auto [key, value] : b.get_object()) {
      if (is_annotation(key) || key == "allOf") continue;
      if (!kObjectKeywords.count(key))
        return error(bpath, "allOf is supported only over object schemas; this branch has '" +
                                std::string(key) + "'");
      if (key == "type" && !(value.is_string() && std::string_view(value) == "object"))
        return error(
            bpath,
            "allOf is supported only over object schemas; this branch's type is not 'object'");
    }
    if (&b == &branches.back().first) {
      // The schema holding allOf contributes only its sibling keywords.
      if (siblings.empty()) continue;
    }
    auto spec = read_object_spec(*this, b, bpath);
    if (!spec) return spec.error();
    if (spec->extra == ObjectSpec::Extra::kSchema)
      return error(bpath, "additionalProperties as a schema inside allOf is not supported");
    bool explicit_false = false;
    Json ap;
    if (!b.get_object()["additionalProperties"].get(ap) && ap.is_bool() && !bool(ap))
      explicit_false = true;
    if (explicit_false) {
      std::set<std::string> names;
      for (auto& p : spec->properties)
        names.insert(p.first);
      if (allowed) {
        std::set<std::string> both;
        std::set_intersection(allowed->begin(), allowed->end(), names.begin(), names.end(),
                              std::inserter(both, both.end()));
        allowed = both;
      } else {
        allowed = names;
      }
    }
    for (auto& [name, sch] : spec->properties) {
      auto it = std::find_if(merged.properties.begin(), merged.properties.end(),
                             [&name = name](auto& p) { return p.first == name; });
      if (it == merged.properties.end()) {
        merged.properties.emplace_back(name, sch);
        schemas.push_back({sch});
      } else {
        auto& list2 = schemas[it - merged.properties.begin()];
        if (simdjson::minify(list2.front()) != simdjson::minify(sch))
          return error(bpath + "/properties/" + name,
                       "property '" + name +
                           "' is constrained differently by two allOf branches; merging them is "
                           "not supported");
      }
    }
    merged.required.insert(spec->required.begin(), spec->required.end());
  }
  if (allowed) {
    std::erase_if(merged.properties, [&](auto& p) { return !allowed->count(p.first); });
    for (const auto& r : merged.required)
      if (!allowed->count(r))
        return error(path, "allOf requires property '" + r +
                               "' that another branch forbids, so nothing matches");
  }
  return emit_object(*this, std::move(merged), path, depth);
}

}  // namespace weft::grammar::detail
