// allOf (and $ref beside other keywords, which is allOf of the two): the branches are merged
// into one schema whose instances are exactly those meeting every branch, keyword by keyword,
// and the result is converted like any schema. Where two branches constrain one keyword in a
// way that has no single-keyword form (two patterns, two `not`s...), the merge nests an allOf
// one level down (properties, items) or refuses, naming the keyword.

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "runtime/grammar/json_schema_converter.hpp"

namespace weft::grammar::detail {
namespace {

// Cross products of anyOf lists (allOf of two anyOfs) are expanded up to this many branches.
constexpr std::size_t kMaxAlternatives = 64;

std::string all_of_text(const std::vector<std::string>& parts) {
  if (parts.size() == 1) return parts[0];
  std::string out = "{\"allOf\":[";
  for (std::size_t i = 0; i < parts.size(); ++i)
    out += (i ? "," : "") + parts[i];
  return out + "]}";
}

const std::set<std::string_view> kTypes{"object",  "array",   "string", "number",
                                        "integer", "boolean", "null"};

std::set<std::string> type_set(Json t) {
  std::set<std::string> out;
  if (t.is_string()) out.emplace(std::string_view(t));
  if (t.is_array())
    for (Json x : t.get_array())
      if (x.is_string()) out.emplace(std::string_view(x));
  return out;
}

}  // namespace

std::string schema_text(const std::vector<std::pair<std::string, std::string>>& keys) {
  std::string out = "{";
  for (std::size_t i = 0; i < keys.size(); ++i)
    out += (i ? "," : "") + json_string_literal(keys[i].first) + ":" + keys[i].second;
  return out + "}";
}

Result<Json> JsonSchemaConverter::synthetic(const std::string& text) {
  auto& p = synthetic_.emplace_back(std::make_unique<Synthetic>());
  p->text = simdjson::padded_string(text);
  Json out;
  if (p->parser.parse(p->text).get(out))
    return Error(ErrorCode::kInternal,
                 "JSON Schema: a merged schema is not valid JSON: " + text.substr(0, 200));
  return out;
}

// Flattens the branches: $ref chains are followed (a $ref beside other keywords splits into
// the target and the rest), nested allOfs are opened, `true` and annotation-only branches
// dropped. Returns the object branches with their paths, or an error (a `false` branch).
static Result<std::vector<std::pair<Json, std::string>>> flatten(
    JsonSchemaConverter& c, std::vector<std::pair<Json, std::string>> todo) {
  std::vector<std::pair<Json, std::string>> out;
  int hops = 0;
  while (!todo.empty()) {
    auto [b, path] = todo.front();
    todo.erase(todo.begin());
    if (++hops > 256) return c.error(path, "allOf/$ref nesting too deep or cyclic");
    if (b.is_bool()) {
      if (bool(b)) continue;
      return c.error(path, "schema 'false' matches nothing, so no output could satisfy it");
    }
    if (!b.is_object()) return c.error(path, "a schema must be an object or a boolean");
    std::vector<std::pair<std::string, std::string>> rest;
    bool split = false;
    for (auto [key, value] : b.get_object()) {
      if (key == "$ref") {
        std::string_view ref;
        if (value.get(ref)) return c.error(path, "$ref must be a string");
        auto t = c.resolve_ref(ref, path);
        if (!t) return t.error();
        todo.emplace_back(*t, std::string(ref));
        split = true;
      } else if (key == "allOf") {
        if (!value.is_array()) return c.error(path + "/allOf", "allOf must be an array");
        std::size_t i = 0;
        for (Json x : value.get_array())
          todo.emplace_back(x, path + "/allOf/" + std::to_string(i++));
        split = true;
      } else if (!is_annotation(key)) {
        rest.emplace_back(std::string(key), simdjson::minify(value));
      }
    }
    if (!split) {
      if (!rest.empty()) out.emplace_back(b, path);
      continue;
    }
    if (rest.empty()) continue;
    auto r = c.synthetic(schema_text(rest));
    if (!r) return r.error();
    out.emplace_back(*r, path);
  }
  return out;
}

Result<Json> JsonSchemaConverter::merge(std::vector<std::pair<Json, std::string>> branches,
                                        const std::string& path) {
  auto flat = flatten(*this, std::move(branches));
  if (!flat) return flat.error();
  if (flat->empty()) return synthetic("{}");
  if (flat->size() == 1) return flat->front().first;

  // Every value of each keyword, in the order keywords first appear.
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::pair<Json, std::string>>> values;
  for (auto& [b, bpath] : *flat) {
    for (auto [key, value] : b.get_object()) {
      if (is_annotation(key)) continue;
      std::string k(key);
      if (!values.count(k)) order.push_back(k);
      values[k].emplace_back(value, bpath);
    }
  }
  std::vector<std::pair<std::string, std::string>> out;
  auto number = [](Json v) { return v.is_number() ? double(v) : NAN; };

  // Property names: those a branch declares and those another branch's additionalProperties
  // governs (n must also satisfy it, or cannot appear when it is false).
  std::vector<std::string> names;
  for (auto& [b, bpath] : *flat) {
    Json props;
    if (!b.get_object()["properties"].get(props) && props.is_object())
      for (auto [name, sub] : props.get_object())
        if (std::find(names.begin(), names.end(), name) == names.end()) names.emplace_back(name);
  }

  for (const auto& key : order) {
    auto& vs = values[key];
    bool same = vs.size() == 1 || std::all_of(vs.begin(), vs.end(), [&](auto& x) {
                  return json_equal(x.first, vs.front().first);
                });
    if (key == "properties" || key == "additionalProperties") {
      if (key == "additionalProperties" && values.count("properties")) continue;
      std::string props = "{";
      bool first = true;
      for (const auto& name : names) {
        std::vector<std::string> parts;
        bool forbidden = false;
        for (auto& [b, bpath] : *flat) {
          Json p, sub, extra;
          auto o = b.get_object();
          if (!o["properties"].get(p) && p.is_object() && !p.get_object().at_key(name).get(sub)) {
            parts.push_back(simdjson::minify(sub));
          } else if (!o["additionalProperties"].get(extra)) {
            if (extra.is_bool() && !bool(extra))
              forbidden = true;
            else if (!extra.is_bool())
              parts.push_back(simdjson::minify(extra));
          }
        }
        if (std::find(parts.begin(), parts.end(), "false") != parts.end()) forbidden = true;
        std::sort(parts.begin(), parts.end());
        parts.erase(std::unique(parts.begin(), parts.end()), parts.end());
        std::erase(parts, "true");
        std::erase(parts, "{}");
        props += (first ? "" : ",") + json_string_literal(name) + ":" +
                 (forbidden       ? "false"
                  : parts.empty() ? "{}"
                                  : all_of_text(parts));
        first = false;
      }
      out.emplace_back("properties", props + "}");
      std::vector<std::string> extras;
      bool closed = false;
      for (auto& [v, bpath] : values["additionalProperties"]) {
        if (v.is_bool())
          closed = closed || !bool(v);
        else
          extras.push_back(simdjson::minify(v));
      }
      if (closed)
        out.emplace_back("additionalProperties", "false");
      else if (!extras.empty())
        out.emplace_back("additionalProperties", all_of_text(extras));
      continue;
    }
    if (same) {
      out.emplace_back(key, simdjson::minify(vs.front().first));
      continue;
    }
    if (key == "type") {
      std::set<std::string> types = {kTypes.begin(), kTypes.end()};
      for (auto& [v, bpath] : vs) {
        std::set<std::string> t = type_set(v), both;
        if (t.count("number")) t.insert("integer");
        if (types.count("number") && !t.count("number")) types.erase("number");
        for (const auto& x : t)
          if (types.count(x)) both.insert(x);
        types = both;
        if (types.count("number")) types.erase("integer");
      }
      if (types.empty()) return error(path, "allOf: the branches' types have nothing in common");
      std::string list = "[";
      for (const auto& t : types)
        list += (list.size() > 1 ? "," : "") + json_string_literal(t);
      out.emplace_back("type", list + "]");
    } else if (key == "required") {
      std::vector<std::string> req;
      for (auto& [v, bpath] : vs)
        if (v.is_array())
          for (Json r : v.get_array())
            if (r.is_string()) {
              std::string n = json_string_literal(std::string_view(r));
              if (std::find(req.begin(), req.end(), n) == req.end()) req.push_back(n);
            }
      std::string list = "[";
      for (const auto& r : req)
        list += (list.size() > 1 ? "," : "") + r;
      out.emplace_back("required", list + "]");
    } else if (key == "minimum" || key == "exclusiveMinimum" || key == "minLength" ||
               key == "minItems" || key == "minProperties" || key == "minContains") {
      auto best = std::max_element(vs.begin(), vs.end(), [&](auto& a, auto& b) {
        return number(a.first) < number(b.first);
      });
      out.emplace_back(key, simdjson::minify(best->first));
    } else if (key == "maximum" || key == "exclusiveMaximum" || key == "maxLength" ||
               key == "maxItems" || key == "maxProperties" || key == "maxContains") {
      auto best = std::min_element(vs.begin(), vs.end(), [&](auto& a, auto& b) {
        return number(a.first) < number(b.first);
      });
      out.emplace_back(key, simdjson::minify(best->first));
    } else if (key == "uniqueItems") {
      out.emplace_back(key, "true");
    } else if (key == "items" || key == "contains" || key == "propertyNames") {
      if (key == "contains") return unsupported(path, "contains", "in two allOf branches");
      std::vector<std::string> parts;
      for (auto& [v, bpath] : vs)
        parts.push_back(simdjson::minify(v));
      out.emplace_back(key, all_of_text(parts));
    } else if (key == "dependentRequired") {
      std::map<std::string, std::set<std::string>> deps;
      for (auto& [v, bpath] : vs)
        if (v.is_object())
          for (auto [name, list] : v.get_object())
            if (list.is_array())
              for (Json r : list.get_array())
                if (r.is_string()) deps[std::string(name)].emplace(std::string_view(r));
      std::string obj = "{";
      for (const auto& [name, list] : deps) {
        std::string l = "[";
        for (const auto& r : list)
          l += (l.size() > 1 ? "," : "") + json_string_literal(r);
        obj += (obj.size() > 1 ? "," : "") + json_string_literal(name) + ":" + l + "]";
      }
      out.emplace_back(key, obj + "}");
    } else if (key == "enum") {
      std::string list = "[";
      if (!vs.front().first.is_array()) return error(vs.front().second, "enum must be an array");
      for (Json x : vs.front().first.get_array()) {
        bool everywhere = true;
        for (std::size_t i = 1; i < vs.size(); ++i) {
          bool found = false;
          if (vs[i].first.is_array())
            for (Json y : vs[i].first.get_array())
              found = found || json_equal(x, y);
          everywhere = everywhere && found;
        }
        if (everywhere) list += (list.size() > 1 ? "," : "") + simdjson::minify(x);
      }
      out.emplace_back(key, list + "]");
    } else if (key == "const") {
      return error(path, "allOf: two branches require different const values, so nothing matches");
    } else if (key == "anyOf" || key == "oneOf") {
      // allOf of several anyOfs: their cross product, as one anyOf.
      std::vector<std::string> product = {""};
      for (auto& [v, bpath] : vs) {
        if (!v.is_array()) return error(bpath + "/" + key, key + " must be an array");
        if (key == "oneOf")
          if (auto ok = check_one_of(v, bpath + "/oneOf"); !ok) return ok.error();
        std::vector<std::string> next;
        for (const auto& p : product)
          for (Json b : v.get_array()) {
            next.push_back(p.empty() ? simdjson::minify(b) : p + "," + simdjson::minify(b));
            if (next.size() > kMaxAlternatives)
              return unsupported(path, key,
                                 "more than " + std::to_string(kMaxAlternatives) +
                                     " alternatives after merging allOf");
          }
        product = std::move(next);
      }
      std::string list = "[";
      for (const auto& p : product)
        list += std::string(list.size() > 1 ? "," : "") + "{\"allOf\":[" + p + "]}";
      out.emplace_back("anyOf", list + "]");
    } else if (key == "not") {
      std::vector<std::string> parts;
      for (auto& [v, bpath] : vs)
        parts.push_back(simdjson::minify(v));
      std::string any = "{\"anyOf\":[";
      for (std::size_t i = 0; i < parts.size(); ++i)
        any += (i ? "," : "") + parts[i];
      out.emplace_back("not", any + "]}");
    } else {
      return unsupported(vs[1].second, key,
                         "constrained differently by two allOf branches ('" + vs[0].second +
                             "' and '" + vs[1].second + "')");
    }
  }
  return synthetic(schema_text(out));
}

}  // namespace weft::grammar::detail
