// The dispatcher: boolean schemas, $ref (one rule per target, so recursion works), enum and
// const, anyOf/oneOf, type unions and inference, and the generic JSON value grammar.
// allOf lives in json_schema_objects.cpp, beside the object merge it needs.

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>

#include "runtime/grammar/grammar_compiler.hpp"
#include "runtime/grammar/json_schema_converter.hpp"
#include "runtime/grammar/regex_to_grammar.hpp"

namespace weft::grammar {
namespace detail {
namespace {

// Schema objects nested deeper than this (not counting $ref, which becomes a rule) are
// refused, which bounds the converter's recursion on hostile input.
constexpr int kMaxSchemaDepth = 64;

const std::set<std::string_view> kAnnotations{
    "title",       "description",    "default",          "examples",         "$schema",
    "$id",         "$comment",       "deprecated",       "readOnly",         "writeOnly",
    "$defs",       "definitions",    "$anchor",          "contentMediaType", "contentEncoding",
    "$vocabulary", "$dynamicAnchor", "$recursiveAnchor", "contentSchema"};
const std::set<std::string_view> kSupported{"type",
                                            "properties",
                                            "required",
                                            "additionalProperties",
                                            "items",
                                            "prefixItems",
                                            "minItems",
                                            "maxItems",
                                            "enum",
                                            "const",
                                            "anyOf",
                                            "oneOf",
                                            "allOf",
                                            "$ref",
                                            "minLength",
                                            "maxLength",
                                            "pattern",
                                            "format",
                                            "minimum",
                                            "maximum",
                                            "exclusiveMinimum",
                                            "exclusiveMaximum",
                                            "uniqueItems",
                                            "minProperties",
                                            "maxProperties",
                                            "dependentRequired",
                                            "not",
                                            "if",
                                            "then",
                                            "else",
                                            "contains",
                                            "minContains",
                                            "maxContains"};

}  // namespace

std::string json_type_name(Json v) {
  switch (v.type()) {
    case simdjson::dom::element_type::OBJECT:
      return "object";
    case simdjson::dom::element_type::ARRAY:
      return "array";
    case simdjson::dom::element_type::STRING:
      return "string";
    case simdjson::dom::element_type::INT64:
    case simdjson::dom::element_type::UINT64:
      return "integer";
    case simdjson::dom::element_type::DOUBLE: {
      double d = double(v);
      // The magnitude test comes first: converting a double beyond long long's range (1e300)
      // is undefined behaviour (found by fuzz_openai_request).
      return std::abs(d) < 9e15 && d == static_cast<double>(static_cast<long long>(d)) ? "integer"
                                                                                       : "number";
    }
    case simdjson::dom::element_type::BOOL:
      return "boolean";
    case simdjson::dom::element_type::NULL_VALUE:
      return "null";
    default:
      return "unknown";
  }
}

// Keywords that constrain an instance but are not generated: refused, never ignored.
const std::set<std::string_view> kUnsupported{
    "multipleOf",       "patternProperties", "propertyNames", "unevaluatedProperties",
    "unevaluatedItems", "dependentSchemas",  "dependencies",  "additionalItems",
    "$dynamicRef",      "$recursiveRef",     "disallow",      "extends",
    "divisibleBy"};

// Annotations, and any keyword JSON Schema does not define (validators ignore those too).
bool is_annotation(std::string_view key) {
  return kAnnotations.count(key) > 0 || (!kSupported.count(key) && !kUnsupported.count(key));
}

JsonSchemaConverter::JsonSchemaConverter(const JsonGrammarOptions& options) : options_(options) {
  if (options_.flexible_whitespace) {
    RuleId ws = g_.add_rule("ws");
    ByteSet space;
    space.set(' ');
    space.set('\t');
    space.set('\n');
    g_.set_body(ws, g_.repeat(g_.bytes(space), 0, options_.max_whitespace));
    ws_ = g_.ref(ws);
  } else {
    ws_ = g_.empty();
  }
}

Error JsonSchemaConverter::error(const std::string& path, const std::string& what) const {
  return Error(ErrorCode::kInvalidArgument,
               "JSON Schema at '" + (path.empty() ? "#" : path) + "': " + what);
}

Error JsonSchemaConverter::unsupported(const std::string& path, const std::string& keyword) const {
  return Error(ErrorCode::kUnsupported, "JSON Schema at '" + (path.empty() ? "#" : path) +
                                            "': unsupported keyword '" + keyword + "'");
}

ExprId JsonSchemaConverter::json_literal(Json value) {
  return g_.literal(simdjson::minify(value));
}

Result<FlatGrammar> JsonSchemaConverter::convert_flat(std::string_view schema_json) {
  simdjson::padded_string text(schema_json);
  auto err = parser_.parse(text).get(root_);
  if (err)
    return Error(ErrorCode::kParse,
                 std::string("JSON Schema is not valid JSON: ") + simdjson::error_message(err));
  RuleId root = g_.add_rule("root");
  auto body = schema(root_, "#", 0);
  if (!body) return body.error();
  g_.set_body(root, *body);
  g_.set_root(root);
  // Flattening checks what the converter cannot see (left recursion through $ref, schemas
  // that can never finish), so every error surfaces when the schema is given, before
  // generation; the flat form is kept for compiling (json_schema_to_flat_grammar).
  auto flat = flatten_grammar(g_);
  if (!flat) return Error(flat.error().code(), std::string("JSON Schema: ") + flat.error().what());
  return flat;
}

Result<Grammar> JsonSchemaConverter::convert(std::string_view schema_json) {
  auto flat = convert_flat(schema_json);
  if (!flat) return flat.error();
  return std::move(g_);
}

Grammar JsonSchemaConverter::any_object() {
  RuleId root = g_.add_rule("root");
  any_value();
  g_.set_body(root, g_.ref(*g_.find_rule("object")));
  g_.set_root(root);
  return std::move(g_);
}

Result<Json> JsonSchemaConverter::resolve_ref(std::string_view ref, const std::string& path) {
  if (!ref.starts_with("#"))
    return error(path, "$ref '" + std::string(ref) +
                           "' is not local (only '#...' references are supported)");
  Json target = root_;
  std::string_view rest = ref.substr(1);
  if (rest.empty()) return target;
  if (!rest.starts_with("/"))
    return error(path, "$ref '" + std::string(ref) + "' is not a JSON pointer");
  rest.remove_prefix(1);
  while (true) {
    auto slash = rest.find('/');
    std::string part(rest.substr(0, slash));
    // JSON pointer escapes: ~1 is '/', ~0 is '~'.
    for (std::size_t k; (k = part.find("~1")) != std::string::npos;)
      part.replace(k, 2, "/");
    for (std::size_t k; (k = part.find("~0")) != std::string::npos;)
      part.replace(k, 2, "~");
    Json next;
    if (target.is_object()) {
      if (target.get_object().at_key(part).get(next))
        return error(path, "$ref '" + std::string(ref) + "' does not resolve: no '" + part + "'");
    } else if (target.is_array()) {
      char* end = nullptr;
      unsigned long idx = std::strtoul(part.c_str(), &end, 10);
      if (part.empty() || *end || target.get_array().at(idx).get(next))
        return error(path, "$ref '" + std::string(ref) + "' does not resolve at '" + part + "'");
    } else {
      return error(path, "$ref '" + std::string(ref) + "' does not resolve");
    }
    target = next;
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
  return target;
}

Result<RuleId> JsonSchemaConverter::schema_rule(Json s, const std::string& path, int depth) {
  auto e = schema(s, path, depth);
  if (!e) return e.error();
  return g_.add_rule("schema_" + std::to_string(rule_counter_++), *e);
}

Result<ExprId> JsonSchemaConverter::schema(Json s, const std::string& path, int depth) {
  if (depth > kMaxSchemaDepth)
    return error(path,
                 "schema nested more than " + std::to_string(kMaxSchemaDepth) + " levels deep");
  if (s.is_bool()) {
    if (bool(s)) return g_.ref(any_value());
    return error(path, "schema 'false' matches nothing, so no output could satisfy it");
  }
  if (!s.is_object())
    return error(path, "a schema must be an object or a boolean, not " + json_type_name(s));
  auto obj = s.get_object().value();
  auto present = [&](std::string_view k) {
    Json x;
    return !obj[k].get(x);
  };
  std::vector<std::string> constraining;
  for (auto [key, value] : obj) {
    if (kAnnotations.count(key)) continue;
    if (kUnsupported.count(key)) {
      if (options_.strict) return unsupported(path, std::string(key));
      warn(path, "'" + std::string(key) + "' is not enforced (not strict)");
      continue;
    }
    if (!kSupported.count(key)) {
      if (!key.starts_with("$") && !key.starts_with("x-"))
        warn(path, "unknown keyword '" + std::string(key) + "' is ignored");
      continue;
    }
    if (key == "uniqueItems" && ((value.is_bool() && !bool(value)) || !options_.strict)) continue;
    // then/else without if, if without either, and min/maxContains without contains do
    // nothing.
    if ((key == "then" || key == "else") && !present("if")) continue;
    if (key == "if" && !present("then") && !present("else")) continue;
    if ((key == "minContains" || key == "maxContains") && !present("contains")) continue;
    constraining.emplace_back(key);
  }
  auto has = [&](std::string_view k) {
    return std::find(constraining.begin(), constraining.end(), k) != constraining.end();
  };
  // The schema without some keywords (annotations dropped too).
  auto without = [&](std::initializer_list<std::string_view> drop) -> Result<Json> {
    std::vector<std::pair<std::string, std::string>> keys;
    for (auto [key, value] : obj) {
      if (std::find(drop.begin(), drop.end(), key) != drop.end()) continue;
      if (!has(key)) continue;
      keys.emplace_back(std::string(key), simdjson::minify(value));
    }
    return synthetic(schema_text(keys));
  };
  // Alternatives (anyOf, and what is rewritten into it): an alternative that is refused or
  // matches nothing is left out with a warning (fewer choices are still valid outputs); all
  // of them refused is an error.
  auto alternatives = [&](const std::vector<std::pair<Json, std::string>>& alts) -> Result<ExprId> {
    std::vector<ExprId> exprs;
    std::optional<Error> first_error;
    for (const auto& [alt, apath] : alts) {
      auto e = schema(alt, apath, depth + 1);
      if (e) {
        exprs.push_back(*e);
        continue;
      }
      if (!first_error) first_error = e.error();
      warn(apath, std::string("alternative left out: ") + e.error().what());
    }
    if (exprs.empty()) {
      if (first_error) return *first_error;
      return error(path, "no alternative matches anything");
    }
    return g_.choice(std::move(exprs));
  };

  if (has("allOf") || (has("$ref") && constraining.size() > 1)) {
    auto merged = merge({{s, path}}, path);
    if (!merged) return merged.error();
    return schema(*merged, path, depth + 1);
  }

  if (has("$ref")) {
    std::string_view ref;
    if (obj["$ref"].get(ref)) return error(path, "$ref must be a string");
    std::string key(ref);
    auto it = ref_rules_.find(key);
    if (it != ref_rules_.end()) return g_.ref(it->second);
    auto target = resolve_ref(ref, path);
    if (!target) return target.error();
    auto failed = failed_refs_.find(key);
    if (failed != failed_refs_.end()) return failed->second;
    RuleId r = new_rule(key);
    const auto cached_before = ref_rules_;
    ref_rules_.emplace(key, r);
    auto body = schema(*target, key, depth + 1);
    if (!body) {
      // Refused (perhaps inside an anyOf that leaves it out): forget every rule made for it,
      // so nothing reachable refers to them, and give the orphans a body so the grammar stays
      // well-formed.
      for (const auto& [k, rule] : ref_rules_)
        if (!cached_before.count(k) && !g_.rule(rule).body) g_.set_body(rule, g_.empty());
      ref_rules_ = cached_before;
      failed_refs_.emplace(key, body.error());
      return body.error();
    }
    g_.set_body(r, *body);
    return g_.ref(r);
  }

  if (has("if")) {
    // if/then/else is anyOf(allOf(if, then), allOf(not if, else)); the second is often not
    // expressible (a `not` over an infinite set) and is then left out.
    auto rest = without({"if", "then", "else"});
    if (!rest) return rest.error();
    Json cond = obj["if"].value(), then_s, else_s;
    std::vector<std::pair<Json, std::string>> yes{{*rest, path}, {cond, path + "/if"}};
    if (!obj["then"].get(then_s)) yes.emplace_back(then_s, path + "/then");
    auto negated = synthetic("{\"not\":" + simdjson::minify(cond) + "}");
    if (!negated) return negated.error();
    std::vector<std::pair<Json, std::string>> no{{*rest, path}, {*negated, path + "/if"}};
    if (!obj["else"].get(else_s)) no.emplace_back(else_s, path + "/else");
    std::vector<std::pair<Json, std::string>> alts;
    for (auto* branch : {&yes, &no}) {
      auto m = merge(*branch, path);
      if (m) alts.emplace_back(*m, branch == &yes ? path + "/then" : path + "/else");
    }
    return alternatives(alts);
  }

  if (has("dependentRequired")) {
    // Each dependency is "the trigger is absent, or it and its dependents are present": the
    // alternatives' product, each merged with the rest of the schema.
    Json deps = obj["dependentRequired"].value();
    if (!deps.is_object())
      return error(path + "/dependentRequired", "dependentRequired must be an object");
    auto rest = without({"dependentRequired"});
    if (!rest) return rest.error();
    std::vector<std::vector<std::pair<Json, std::string>>> product{{{*rest, path}}};
    for (auto [trigger, list] : deps.get_object()) {
      if (!list.is_array())
        return error(path + "/dependentRequired", "dependentRequired values must be arrays");
      const std::string name = schema_text({{std::string(trigger), "0"}});  // {"name":0}
      std::string req = "[" + name.substr(1, name.size() - 4);
      for (Json r : list.get_array())
        req += "," + simdjson::minify(r);
      auto off =
          synthetic(schema_text({{"properties", schema_text({{std::string(trigger), "false"}})}}));
      auto on = synthetic("{\"required\":" + req + "]}");
      if (!off || !on) return error(path, "dependentRequired: bad property name");
      std::vector<std::vector<std::pair<Json, std::string>>> next;
      for (const auto& p : product)
        for (Json choice : {*off, *on}) {
          next.push_back(p);
          next.back().emplace_back(choice, path + "/dependentRequired");
        }
      if (next.size() > 16)
        return unsupported(path, "dependentRequired", "more than 4 dependencies");
      product = std::move(next);
    }
    std::vector<std::pair<Json, std::string>> alts;
    for (const auto& p : product) {
      auto m = merge(p, path);
      if (m) alts.emplace_back(*m, path);
    }
    return alternatives(alts);
  }

  if ((has("anyOf") || has("oneOf")) && !has("enum") && !has("const")) {
    const char* key = has("anyOf") ? "anyOf" : "oneOf";
    Json list = obj[key].value();
    if (!list.is_array()) return error(path + "/" + key, std::string(key) + " must be an array");
    if (std::string_view(key) == "oneOf") {
      if (auto exclusive = check_one_of(list, path + "/oneOf"); !exclusive) {
        return exclusive.error();
      }
    }
    if (list.get_array().size() == 0)
      return error(path + "/" + key, std::string(key) + " is empty, so nothing matches");
    std::vector<std::pair<Json, std::string>> alts;
    std::size_t i = 0;
    if (constraining.size() == 1) {
      for (Json sub : list.get_array())
        alts.emplace_back(sub, path + "/" + key + "/" + std::to_string(i++));
    } else {
      // Beside other keywords: each branch merged with them.
      auto rest = without({key});
      if (!rest) return rest.error();
      for (Json sub : list.get_array()) {
        std::string bpath = path + "/" + key + "/" + std::to_string(i++);
        auto m = merge({{*rest, path}, {sub, bpath}}, bpath);
        if (!m) {
          warn(bpath, std::string("alternative left out: ") + m.error().what());
          continue;
        }
        alts.emplace_back(*m, bpath);
      }
    }
    return alternatives(alts);
  }

  Json type_value;
  std::vector<std::string> types;
  if (!obj["type"].get(type_value)) {
    if (type_value.is_string()) {
      types.emplace_back(std::string_view(type_value));
    } else if (type_value.is_array()) {
      for (Json t : type_value.get_array()) {
        if (!t.is_string()) return error(path + "/type", "type names must be strings");
        types.emplace_back(std::string_view(t));
      }
      if (types.empty()) return error(path + "/type", "an empty type list matches nothing");
    } else {
      return error(path + "/type", "type must be a string or an array of strings");
    }
    static const std::set<std::string_view> kTypes{"object",  "array",   "string", "number",
                                                   "integer", "boolean", "null"};
    for (const auto& t : types)
      if (!kTypes.count(t)) return error(path + "/type", "unknown type '" + t + "'");
  }

  if (has("not") && !has("enum") && !has("const")) {
    // `not` is generated where what remains is finite (booleans, null: enumerated and
    // filtered below) or where it excludes whole types.
    Json neg = obj["not"].value();
    std::vector<std::string> neg_types;
    bool only_type = neg.is_object();
    if (neg.is_object()) {
      for (auto [key, value] : neg.get_object()) {
        if (is_annotation(key)) continue;
        if (key != "type") only_type = false;
      }
      Json t;
      if (!neg.get_object()["type"].get(t)) {
        if (t.is_string()) neg_types.emplace_back(std::string_view(t));
        if (t.is_array())
          for (Json x : t.get_array())
            if (x.is_string()) neg_types.emplace_back(std::string_view(x));
      } else {
        only_type = false;
      }
    }
    if (neg.is_bool() && bool(neg)) return error(path + "/not", "'not: true' matches nothing");
    if (neg.is_bool()) {
      auto rest = without({"not"});
      if (!rest) return rest.error();
      return schema(*rest, path, depth + 1);
    }
    std::vector<std::string> base = types;
    if (base.empty()) base = {"object", "array", "string", "number", "boolean", "null"};
    bool finite = std::all_of(base.begin(), base.end(),
                              [](const std::string& t) { return t == "boolean" || t == "null"; });
    if (finite) {
      std::string values = "[";
      for (const auto& t : base)
        values += std::string(values.size() > 1 ? "," : "") + (t == "null" ? "null" : "true,false");
      auto rest = without({});
      if (!rest) return rest.error();
      std::vector<std::pair<std::string, std::string>> keys;
      for (auto [key, value] : rest->get_object())
        keys.emplace_back(std::string(key), simdjson::minify(value));
      keys.emplace_back("enum", values + "]");
      auto e = synthetic(schema_text(keys));
      if (!e) return e.error();
      return schema(*e, path, depth + 1);
    }
    // Not strict: a `not` that cannot be generated is skipped.
    auto skip_not = [&]() -> Result<ExprId> {
      warn(path + "/not", "'not' is not enforced (not strict)");
      auto rest = without({"not"});
      if (!rest) return rest.error();
      return schema(*rest, path, depth + 1);
    };
    if (!only_type) {
      if (!options_.strict) return skip_not();
      return unsupported(path, "not",
                         "only a `not` over types, or over booleans and null, is generated");
    }
    std::vector<std::string> kept;
    for (const auto& t : base) {
      bool excluded = std::find(neg_types.begin(), neg_types.end(), t) != neg_types.end() ||
                      (t == "integer" &&
                       std::find(neg_types.begin(), neg_types.end(), "number") != neg_types.end());
      if (t == "number" &&
          std::find(neg_types.begin(), neg_types.end(), "integer") != neg_types.end() &&
          !excluded) {
        if (!options_.strict) return skip_not();
        return unsupported(path, "not", "numbers that are not integers are not generated");
      }
      if (!excluded) kept.push_back(t);
    }
    if (kept.empty())
      return error(path, "'not' excludes every type the schema allows, so nothing matches");
    std::vector<std::pair<std::string, std::string>> keys;
    for (auto [key, value] : obj) {
      if (key == "not" || key == "type" || !has(key)) continue;
      keys.emplace_back(std::string(key), simdjson::minify(value));
    }
    std::string list = "[";
    for (const auto& t : kept)
      list += std::string(list.size() > 1 ? "," : "") + "\"" + t + "\"";
    keys.emplace_back("type", list + "]");
    auto e = synthetic(schema_text(keys));
    if (!e) return e.error();
    return schema(*e, path, depth + 1);
  }

  if (has("enum") || has("const")) {
    // The values, each kept only where it also meets every other keyword of the schema.
    std::vector<Json> values;
    const char* key = has("const") ? "const" : "enum";
    if (has("const")) {
      values.push_back(obj["const"].value());
    } else {
      Json e = obj["enum"].value();
      if (!e.is_array()) return error(path + "/enum", "enum must be an array");
      for (Json v : e.get_array())
        values.push_back(v);
    }
    auto rest = without({key});
    if (!rest) return rest.error();
    std::vector<ExprId> alts;
    for (Json v : values) {
      auto ok = validate(v, *rest);
      if (!ok)
        return unsupported(
            path, key,
            "value '" + simdjson::minify(v).substr(0, 60) +
                "' cannot be checked against its sibling keywords (a format, or a keyword "
                "the converter's validator does not know)");
      if (*ok) alts.push_back(json_literal(v));
    }
    if (alts.empty())
      return error(
          path, has("const")
                    ? "const value does not meet the schema's other keywords, so nothing matches"
                    : "enum has no value meeting the schema's other keywords, so nothing matches");
    return g_.choice(std::move(alts));
  }

  if (types.empty()) {
    // No type: infer it from the keywords present; none at all means any value.
    auto any_of = [&](std::initializer_list<std::string_view> keys) {
      return std::any_of(keys.begin(), keys.end(), [&](std::string_view k) { return has(k); });
    };
    if (any_of(
            {"properties", "required", "additionalProperties", "minProperties", "maxProperties"}))
      types.emplace_back("object");
    if (any_of({"items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains"}))
      types.emplace_back("array");
    if (any_of({"minLength", "maxLength", "pattern", "format"})) types.emplace_back("string");
    if (any_of({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}))
      types.emplace_back("number");
    if (types.empty()) return g_.ref(any_value());
  }
  std::vector<ExprId> alts;
  for (const auto& t : types) {
    Result<ExprId> e = Error(ErrorCode::kInternal, "");
    if (t == "object")
      e = object_schema(s, path, depth);
    else if (t == "array")
      e = array_schema(s, path, depth);
    else if (t == "string")
      e = string_schema(s, path);
    else if (t == "number")
      e = number_schema(s, path, false);
    else if (t == "integer")
      e = number_schema(s, path, true);
    else if (t == "boolean")
      e = g_.choice({token("true"), token("false")});
    else
      e = token("null");
    if (!e) return e.error();
    alts.push_back(*e);
  }
  return g_.choice(std::move(alts));
}

}  // namespace detail

Result<Grammar> json_schema_to_grammar(std::string_view schema_json,
                                       const JsonGrammarOptions& options) {
  return detail::JsonSchemaConverter(options).convert(schema_json);
}

Result<FlatGrammar> json_schema_to_flat_grammar(std::string_view schema_json,
                                                const JsonGrammarOptions& options) {
  return detail::JsonSchemaConverter(options).convert_flat(schema_json);
}

Grammar json_object_grammar(const JsonGrammarOptions& options) {
  return detail::JsonSchemaConverter(options).any_object();
}

}  // namespace weft::grammar
