// Arrays: prefixItems, items, minItems/maxItems.

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
    double d = n.is_number() ? double(n) : -1;
    if (d < 0 || d != static_cast<double>(static_cast<std::uint64_t>(d)))
      return error(path + "/" + key, std::string(key) + " must be a non-negative integer");
    return static_cast<std::uint64_t>(d);
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
  std::uint64_t expanded = std::max<std::uint64_t>(lo, prefix.size());
  if (hi != unbounded) expanded = hi;
  if (expanded > kMaxExpandedItems)
    return error(path, "arrays with bounds past " + std::to_string(kMaxExpandedItems) +
                           " items are not supported");

  auto element = [&](std::uint64_t j) { return g_.ref(j < prefix.size() ? prefix[j] : *items); };
  // tail(j): the elements from index j on, each preceded by a comma (j > 0) or not (j == 0).
  // Built from the end so each is one rule referring to the next.
  std::optional<ExprId> tail;
  if (hi == unbounded) {
    // From index `expanded` on, any number of `items` elements.
    ExprId more = g_.star(g_.sequence({comma(), g_.ref(*items)}));
    if (expanded == 0) {
      tail = g_.optional(g_.sequence({g_.ref(*items), more}));
    } else {
      tail = more;
    }
  } else {
    tail = g_.empty();
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
