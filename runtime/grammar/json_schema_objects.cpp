// Objects: properties in the schema's order, required ones always present, optional ones
// skippable, and additionalProperties; allOf over object schemas, merged soundly.

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "runtime/grammar/json_schema_converter.hpp"

namespace weft::grammar::detail {
namespace {

struct ObjectSpec {
  std::vector<std::pair<std::string, Json>> properties;  // schema order
  std::set<std::string> required;
  enum class Extra { kNone, kAny, kSchema } extra = Extra::kNone;
  Json extra_schema;
  std::optional<std::uint64_t> min_properties, max_properties;
};

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
  for (const char* key : {"minProperties", "maxProperties"}) {
    if (obj[key].get(v)) continue;
    auto n = json_count(v);
    if (!n) return c.error(path + "/" + key, std::string(key) + " must be a non-negative integer");
    (std::string_view(key) == "minProperties" ? spec.min_properties : spec.max_properties) = *n;
  }
  return spec;
}

// A key (with its quotes) that is none of `names`: printable ASCII without escapes, so its
// text is its value, walked along the names' trie; leaving the trie frees the rest.
static ExprId key_not_in(JsonSchemaConverter& c, const std::set<std::string>& declared) {
  Grammar& g = c.g_;
  std::set<std::string> names;  // as they are written between the quotes
  for (const auto& n : declared) {
    std::string k = json_string_literal(n);
    names.insert(k.substr(1, k.size() - 2));
  }
  ByteSet allowed = ByteSet::range(0x20, 0x7e);
  allowed.words['"' >> 6] &= ~(std::uint64_t{1} << ('"' & 63));
  allowed.words['\\' >> 6] &= ~(std::uint64_t{1} << ('\\' & 63));
  RuleId free = c.new_rule("key_free");
  g.set_body(free, g.sequence({g.star(g.bytes(allowed)), g.byte('"')}));
  // The trie's nodes as ranges of the sorted names sharing a prefix of `depth` bytes, built
  // with a worklist: a recursion per byte overflowed the stack on a 6 KB property name (found
  // by fuzz_json_schema), and rescanning every name at every node was quadratic in its length.
  const std::vector<std::string> sorted(names.begin(), names.end());
  struct Node {
    std::size_t lo, hi, depth;  // sorted[lo, hi) share sorted[lo]'s first `depth` bytes
    RuleId rule;                // whose body this node is (unused for the root)
  };
  std::vector<Node> pending;
  auto body = [&](const Node& at) -> ExprId {
    std::vector<ExprId> alts;
    std::size_t i = at.lo;
    // Sorted: a name that ends here (the prefix itself) comes first.
    const bool terminal = i < at.hi && sorted[i].size() == at.depth;
    if (terminal) ++i;
    if (!terminal) alts.push_back(g.byte('"'));
    ByteSet others = allowed;
    while (i < at.hi) {
      const auto b = static_cast<std::uint8_t>(sorted[i][at.depth]);
      std::size_t j = i + 1;
      while (j < at.hi && static_cast<std::uint8_t>(sorted[j][at.depth]) == b)
        ++j;
      if (allowed.test(b)) {
        others.words[b >> 6] &= ~(std::uint64_t{1} << (b & 63));
        RuleId r = c.new_rule("key");
        pending.push_back({i, j, at.depth + 1, r});
        alts.push_back(g.sequence({g.byte(b), g.ref(r)}));
      }
      i = j;
    }
    if (!others.empty()) alts.push_back(g.sequence({g.bytes(others), g.ref(free)}));
    return g.choice(std::move(alts));
  };
  const ExprId root = body({0, sorted.size(), 0, RuleId{}});
  while (!pending.empty()) {
    const Node at = pending.back();
    pending.pop_back();
    g.set_body(at.rule, body(at));
  }
  return g.sequence({g.byte('"'), root});
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
  std::set<std::string> declared_names;
  for (const auto& p : spec.properties)
    declared_names.insert(p.first);
  std::vector<ExprId> members;
  std::vector<bool> required;
  for (const auto& [name, schema] : spec.properties) {
    // A property whose schema is false must not appear.
    if (schema.is_bool() && !bool(schema) && !spec.required.count(name)) continue;
    ExprId value;
    if (any_value_names.count(name)) {
      value = g.ref(c.any_value());
    } else {
      auto r = c.schema_rule(schema, path + "/properties/" + name, depth + 1);
      if (!r) return r.error();
      value = g.ref(*r);
    }
    members.push_back(g.sequence({c.token(json_string_literal(name)), c.colon(), value}));
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
    // Extra names differ from the declared ones (whose own schemas govern them).
    ExprId key = declared_names.empty() ? g.ref(c.any_string()) : key_not_in(c, declared_names);
    extra = g.sequence({key, c.colon(), value});
  }
  const std::size_t n = members.size();
  if (spec.min_properties || spec.max_properties) {
    // Counted: state (i, k) is "members i.. to go, k written". Only declared members count
    // toward minProperties (extra names may repeat, and a validator counts distinct names);
    // every member counts toward maxProperties.
    const std::uint64_t lo = spec.min_properties.value_or(0);
    const std::uint64_t hi = spec.max_properties.value_or(~std::uint64_t{0});
    std::vector<std::size_t> req_left(n + 1, 0), opt_left(n + 1, 0);
    for (std::size_t i = n; i-- > 0;) {
      req_left[i] = req_left[i + 1] + (required[i] ? 1 : 0);
      opt_left[i] = opt_left[i + 1] + (required[i] ? 0 : 1);
    }
    if (req_left[0] > hi)
      return c.error(path, "maxProperties " + std::to_string(hi) + " is below the " +
                               std::to_string(req_left[0]) +
                               " required properties, so nothing matches");
    // One extra member counts toward minProperties too (a single extra name cannot repeat).
    const std::uint64_t extra_count = extra ? 1 : 0;
    if (req_left[0] + opt_left[0] + extra_count < lo)
      return c.unsupported(path, "minProperties",
                           "above the properties that can be generated (" + std::to_string(n) +
                               " declared" + (extra ? ", and extra names may repeat" : "") + ")");
    const std::uint64_t cap = spec.max_properties ? hi : lo;  // counts saturate at cap
    if ((n + 1) * (cap + 1) > 20000)
      return c.unsupported(path, "minProperties", "too many states with maxProperties");
    std::map<std::pair<std::size_t, std::uint64_t>, RuleId> rules;
    auto feasible = [&](std::size_t i, std::uint64_t k) {
      return k + req_left[i] <= hi && k + req_left[i] + opt_left[i] + extra_count >= lo;
    };
    std::function<ExprId(std::size_t, std::uint64_t)> state = [&](std::size_t i,
                                                                  std::uint64_t k) -> ExprId {
      auto it = rules.find({i, k});
      if (it != rules.end()) return g.ref(it->second);
      RuleId r = c.new_rule("obj_count");
      rules.emplace(std::make_pair(i, k), r);
      std::vector<ExprId> alts;
      if (i == n) {
        if (extra && k < hi) {
          const std::uint64_t room = hi == ~std::uint64_t{0} ? kUnbounded : hi - k;
          ExprId more =
              g.repeat(g.sequence({c.comma(), *extra}), 0,
                       static_cast<std::uint32_t>(std::min<std::uint64_t>(room, kUnbounded)));
          if (k < lo) {  // k == lo - 1: one extra member is needed
            ExprId first = k == 0 ? *extra : g.sequence({c.comma(), *extra});
            alts.push_back(g.sequence(
                {first, g.repeat(g.sequence({c.comma(), *extra}), 0,
                                 room == kUnbounded ? kUnbounded
                                                    : static_cast<std::uint32_t>(room - 1))}));
          } else if (k == 0) {
            ExprId rest =
                g.repeat(g.sequence({c.comma(), *extra}), 0,
                         room == kUnbounded ? kUnbounded : static_cast<std::uint32_t>(room - 1));
            alts.push_back(g.optional(g.sequence({*extra, rest})));
          } else {
            alts.push_back(more);
          }
        } else {
          alts.push_back(g.empty());
        }
      } else {
        const std::uint64_t k1 = std::min<std::uint64_t>(k + 1, cap == hi ? hi : cap);
        if (k + 1 <= hi && feasible(i + 1, k + 1)) {
          ExprId m = k == 0 ? members[i] : g.sequence({c.comma(), members[i]});
          alts.push_back(g.sequence({m, state(i + 1, k1)}));
        }
        if (!required[i] && feasible(i + 1, k)) alts.push_back(state(i + 1, k));
      }
      g.set_body(r, g.choice(std::move(alts)));
      return g.ref(r);
    };
    return g.sequence({g.byte('{'), c.ws(), state(0, 0), c.ws(), g.byte('}')});
  }
  // first(i): members i.. when nothing has been written yet; after(i): when something has, so
  // each member is preceded by a comma. Both are linear in the number of properties.
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

std::string json_string_literal(std::string_view name) {
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

}  // namespace weft::grammar::detail
