// Arrays: prefixItems, items, minItems/maxItems.

#include <algorithm>
#include <functional>
#include <map>

#include "runtime/grammar/json_schema_converter.hpp"

namespace weft::grammar::detail {

namespace {
// Element positions are expanded one rule each up to max(minItems, prefixItems) and maxItems;
// past this the schema is refused instead of building a huge grammar.
constexpr std::uint64_t kMaxExpandedItems = 1024;
}  // namespace

Result<ExprId> JsonSchemaConverter::array_schema(Json s, const std::string& path, int depth) {
  auto obj = s.get_object().value();
  Json v;
  std::vector<RuleId> prefix;
  if (!obj["prefixItems"].get(v)) {
    if (!v.is_array())
      return error(path + "/prefixItems", "prefixItems must be an array of schemas");
    std::size_t i = 0;
    for (Json item : v.get_array()) {
      auto r = schema_rule(item, path + "/prefixItems/" + std::to_string(i++), depth + 1);
      if (!r) return r.error();
      prefix.push_back(*r);
    }
  }
  // items: a schema for the elements after prefixItems. Absent with prefixItems means none
  // (strict, as for additionalProperties); absent without prefixItems means any value.
  std::optional<RuleId> items;
  bool items_allowed = true;
  if (!obj["items"].get(v)) {
    if (v.is_bool() && !bool(v)) {
      items_allowed = false;
    } else if (v.is_array()) {
      return unsupported(path + "/items", "items as an array (draft 4 tuples; use prefixItems)");
    } else {
      auto r = schema_rule(v, path + "/items", depth + 1);
      if (!r) return r.error();
      items = *r;
    }
  } else if (!prefix.empty()) {
    items_allowed = false;
  } else {
    items = any_value();
  }
  auto count = [&](const char* key, std::uint64_t fallback) -> Result<std::uint64_t> {
    Json n;
    if (obj[key].get(n)) return fallback;
    auto c = json_count(n);
    if (!c) return error(path + "/" + key, std::string(key) + " must be a non-negative integer");
    return *c;
  };
  auto min_items = count("minItems", 0);
  if (!min_items) return min_items.error();
  const std::uint64_t unbounded = ~std::uint64_t{0};
  auto max_items = count("maxItems", unbounded);
  if (!max_items) return max_items.error();
  std::uint64_t lo = *min_items, hi = *max_items;
  if (!items_allowed) hi = std::min<std::uint64_t>(hi, prefix.size());
  if (lo > hi)
    return error(path, "minItems " + std::to_string(lo) +
                           " exceeds the most items the schema allows (" + std::to_string(hi) +
                           "), so nothing matches");
  // contains: the first minContains (default 1) elements are made to match it as well (the
  // others may or may not); maxContains is refused.
  std::vector<std::optional<RuleId>> containing;
  if (!obj["contains"].get(v)) {
    Json n;
    if (!obj["maxContains"].get(n) && options_.strict) return unsupported(path, "maxContains");
    std::uint64_t m = 1;
    if (!obj["minContains"].get(n)) {
      auto c = json_count(n);
      if (!c) return error(path + "/minContains", "minContains must be a non-negative integer");
      m = *c;
    }
    if (m > kMaxExpandedItems) return unsupported(path, "minContains", "too large");
    Json unique;
    if (m > 0 && options_.strict && !obj["uniqueItems"].get(unique) && unique.is_bool() &&
        bool(unique))
      return unsupported(path, "contains", "beside uniqueItems");
    lo = std::max(lo, m);
    if (lo > hi)
      return error(path, "minContains " + std::to_string(m) +
                             " exceeds the most items allowed, so nothing matches");
    Json prefix_list, item_schema;
    bool has_prefix = !obj["prefixItems"].get(prefix_list) && prefix_list.is_array();
    bool has_items = !obj["items"].get(item_schema);
    for (std::uint64_t j = 0; j < m; ++j) {
      Json own;
      std::vector<std::pair<Json, std::string>> parts{{v, path + "/contains"}};
      if (has_prefix && !prefix_list.get_array().at(j).get(own))
        parts.emplace_back(own, path + "/prefixItems/" + std::to_string(j));
      else if (has_items)
        parts.emplace_back(item_schema, path + "/items");
      auto merged = merge(parts, path + "/contains");
      if (!merged) return merged.error();
      auto r = schema_rule(*merged, path + "/contains", depth + 1);
      if (!r) return r.error();
      containing.push_back(*r);
    }
  }
  // uniqueItems: exact over items of a few known values (every subset, in any order), in the
  // values' order for more of them, and otherwise at most one element.
  Json unique;
  if (options_.strict && !obj["uniqueItems"].get(unique) && unique.is_bool() && bool(unique) &&
      hi > 1) {
    if (!prefix.empty()) return unsupported(path, "uniqueItems", "beside prefixItems");
    Json item_schema;
    std::optional<std::vector<Json>> values;
    if (!obj["items"].get(item_schema)) values = finite_values(item_schema);
    if (!values) {
      if (lo > 1)
        return unsupported(path, "uniqueItems",
                           "with minItems above 1 over items that are not a few known values");
      warn(path + "/uniqueItems",
           "items that are not a few known values: at most one element is generated");
      hi = 1;
    } else {
      return unique_array(*values, lo, hi, path);
    }
  }
  // The first elements with schemas of their own (prefixItems, contains) are one rule each;
  // the rest, all `items`, are one repetition whose bounds are what minItems and maxItems leave
  // (counted by the matcher when large, grammar_compiler.hpp).
  const std::uint64_t expanded =
      std::min<std::uint64_t>(hi, std::max<std::uint64_t>(prefix.size(), containing.size()));
  if (expanded > kMaxExpandedItems)
    return error(path, "arrays with bounds past " + std::to_string(kMaxExpandedItems) +
                           " items are not supported");
  const std::uint64_t rest_lo = lo > expanded ? lo - expanded : 0;
  const std::uint64_t rest_hi = hi == unbounded ? unbounded : hi - expanded;
  if (rest_hi != unbounded && rest_hi >= kUnbounded)
    return error(path + "/maxItems", "maxItems " + std::to_string(hi) + " is too large");
  if (rest_lo >= kUnbounded)
    return error(path + "/minItems", "minItems " + std::to_string(lo) + " is too large");

  auto element = [&](std::uint64_t j) {
    if (j < containing.size()) return g_.ref(*containing[j]);
    return g_.ref(j < prefix.size() ? prefix[j] : *items);
  };
  // tail(j): the elements from index j on, each preceded by a comma (j > 0) or not (j == 0).
  // Built from the end so each is one rule referring to the next.
  std::optional<ExprId> tail;
  if (rest_hi == 0) {
    tail = g_.empty();
  } else {
    // From index `expanded` on, rest_lo to rest_hi `items` elements.
    const auto max_more = rest_hi == unbounded ? kUnbounded : static_cast<std::uint32_t>(rest_hi);
    ExprId next = g_.sequence({comma(), g_.ref(*items)});
    if (expanded == 0) {
      const auto min_more = static_cast<std::uint32_t>(rest_lo > 0 ? rest_lo - 1 : 0);
      ExprId some = g_.sequence(
          {g_.ref(*items),
           g_.repeat(next, min_more, max_more == kUnbounded ? kUnbounded : max_more - 1)});
      tail = rest_lo == 0 ? g_.optional(some) : some;
    } else {
      tail = g_.repeat(next, static_cast<std::uint32_t>(rest_lo), max_more);
    }
  }
  for (std::uint64_t j = expanded; j-- > 0;) {
    RuleId r = new_rule("items");
    ExprId with =
        j == 0 ? g_.sequence({element(j), *tail}) : g_.sequence({comma(), element(j), *tail});
    g_.set_body(r, j < lo ? with : g_.optional(with));
    tail = g_.ref(r);
  }
  return g_.sequence({g_.byte('['), ws(), *tail, ws(), g_.byte(']')});
}

}  // namespace weft::grammar::detail

namespace weft::grammar::detail {

// The values a schema allows when they are few and known: its enum/const (each checked against
// the schema's other keywords), or the booleans and null of a type list of those only.
std::optional<std::vector<Json>> JsonSchemaConverter::finite_values(Json s, int depth) {
  if (depth > 16 || !s.is_object()) return std::nullopt;
  auto obj = s.get_object().value();
  Json v;
  std::string_view ref;
  if (!obj["$ref"].get(ref) && obj.size() == 1) {
    auto t = resolve_ref(ref, "#");
    if (!t) return std::nullopt;
    return finite_values(*t, depth + 1);
  }
  std::vector<Json> candidates;
  if (!obj["const"].get(v)) {
    candidates.push_back(v);
  } else if (!obj["enum"].get(v) && v.is_array()) {
    for (Json x : v.get_array())
      candidates.push_back(x);
  } else if (!obj["type"].get(v)) {
    std::vector<std::string_view> types;
    if (v.is_string()) types.push_back(std::string_view(v));
    if (v.is_array())
      for (Json t : v.get_array())
        if (t.is_string()) types.push_back(std::string_view(t));
    for (auto t : types) {
      if (t != "boolean" && t != "null") return std::nullopt;
      auto lit = synthetic(t == "null" ? "[null]" : "[true,false]");
      if (!lit) return std::nullopt;
      for (Json x : lit->get_array())
        candidates.push_back(x);
    }
  } else {
    return std::nullopt;
  }
  std::vector<Json> out;
  for (Json x : candidates) {
    bool dup = std::any_of(out.begin(), out.end(), [&](Json y) { return json_equal(x, y); });
    auto ok = validate(x, s);
    if (!ok) return std::nullopt;
    if (*ok && !dup) out.push_back(x);
  }
  if (out.empty() || out.size() > 64) return std::nullopt;
  return out;
}

// Arrays of distinct values, lo..hi of them: with up to 5 values every subset in any order
// (a rule per set of values used), past that each value at most once in the given order.
Result<ExprId> JsonSchemaConverter::unique_array(const std::vector<Json>& values, std::uint64_t lo,
                                                 std::uint64_t hi, const std::string& path) {
  const std::size_t k = values.size();
  hi = std::min<std::uint64_t>(hi, k);
  if (lo > hi)
    return error(path, "minItems " + std::to_string(lo) + " exceeds the " + std::to_string(k) +
                           " distinct values uniqueItems allows, so nothing matches");
  std::vector<ExprId> lits;
  for (Json v : values)
    lits.push_back(json_literal(v));
  std::map<std::pair<std::uint64_t, std::uint64_t>, RuleId> rules;
  // exact: state = set of used values (bit mask); ordered: state = (next index, count).
  const bool exact = k <= 5;
  std::function<ExprId(std::uint64_t, std::uint64_t)> state = [&](std::uint64_t a,
                                                                  std::uint64_t count) -> ExprId {
    auto it = rules.find({a, count});
    if (it != rules.end()) return g_.ref(it->second);
    RuleId r = new_rule("unique");
    rules.emplace(std::make_pair(a, count), r);
    std::vector<ExprId> alts;
    if (count >= lo) alts.push_back(g_.empty());
    if (count < hi) {
      for (std::size_t i = exact ? 0 : a; i < k; ++i) {
        if (exact && (a >> i & 1)) continue;
        std::uint64_t next = exact ? (a | (std::uint64_t{1} << i)) : i + 1;
        if (!exact && count + 1 + (k - i - 1) < lo) continue;
        ExprId e = count == 0 ? lits[i] : g_.sequence({comma(), lits[i]});
        alts.push_back(g_.sequence({e, state(next, count + 1)}));
      }
    }
    g_.set_body(r, g_.choice(std::move(alts)));
    return g_.ref(r);
  };
  return g_.sequence({g_.byte('['), ws(), state(0, 0), ws(), g_.byte(']')});
}

}  // namespace weft::grammar::detail
