#pragma once
// The JSON Schema converter's shared state; its methods are split by keyword family across
// json_schema_*.cpp (objects, arrays, strings, numbers, and the dispatcher with $ref and the
// combinators), so no one file grows into XGrammar's json_schema_converter.cc.

#include <simdjson.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/grammar/json_schema_to_grammar.hpp"

namespace weft::grammar::detail {

using Json = simdjson::dom::element;

class JsonSchemaConverter {
 public:
  explicit JsonSchemaConverter(const JsonGrammarOptions& options);

  // The schema's grammar (convert), or its flat form (convert_flat): either way it is
  // flattened once, which is also its check.
  Result<Grammar> convert(std::string_view schema_json);
  Result<FlatGrammar> convert_flat(std::string_view schema_json);
  Grammar any_object();

  // Dispatch (json_schema_to_grammar.cpp).
  Result<ExprId> schema(Json s, const std::string& path, int depth);
  Result<RuleId> schema_rule(Json s, const std::string& path, int depth);
  Result<Json> resolve_ref(std::string_view ref, const std::string& path);
  Error error(const std::string& path, const std::string& what) const;
  Error unsupported(const std::string& path, const std::string& keyword) const;
  // "unsupported keyword 'K': detail"
  Error unsupported(const std::string& path, const std::string& keyword,
                    const std::string& detail) const {
    return Error(ErrorCode::kUnsupported, "JSON Schema at '" + (path.empty() ? "#" : path) +
                                              "': unsupported keyword '" + keyword +
                                              "': " + detail);
  }
  void warn(const std::string& path, const std::string& what) const {
    if (options_.warnings) options_.warnings->push_back("JSON Schema at '" + path + "': " + what);
  }

  // Generic JSON values (json_schema_to_grammar.cpp).
  RuleId any_value();
  ExprId ws() { return ws_; }
  ExprId token(std::string_view text) { return g_.literal(text); }
  ExprId comma() { return g_.sequence({ws_, g_.byte(','), ws_}); }
  ExprId colon() { return g_.sequence({ws_, g_.byte(':'), ws_}); }
  ExprId json_literal(Json value);  // the compact serialisation

  // Keyword families.
  Result<ExprId> object_schema(Json s, const std::string& path, int depth);
  Result<ExprId> array_schema(Json s, const std::string& path, int depth);
  Result<ExprId> string_schema(Json s, const std::string& path);
  Result<ExprId> number_schema(Json s, const std::string& path, bool integer);
  // allOf, and $ref beside other keywords: the branches merged into one schema, a synthetic
  // document kept alive by the converter (json_schema_merge.cpp).
  Result<Json> merge(std::vector<std::pair<Json, std::string>> branches, const std::string& path);
  Result<Json> synthetic(const std::string& text);
  // Does value v meet schema s? nullopt where it cannot tell (json_schema_validate.cpp).
  std::optional<bool> validate(Json v, Json s, int depth = 0);
  // uniqueItems (json_schema_arrays.cpp).
  std::optional<std::vector<Json>> finite_values(Json s, int depth = 0);
  Result<ExprId> unique_array(const std::vector<Json>& values, std::uint64_t lo, std::uint64_t hi,
                              const std::string& path);
  // oneOf is generated as anyOf; this refuses it unless no value can match two branches
  // (json_schema_one_of.cpp).
  Result<void> check_one_of(Json list, const std::string& path);
  RuleId any_string();
  RuleId any_number();
  // One character inside a JSON string (a shared rule, so its masks are computed once).
  ExprId string_char();

  Grammar g_;

 private:
  JsonGrammarOptions options_;
  simdjson::dom::parser parser_;
  Json root_;
  ExprId ws_ = 0;
  std::optional<RuleId> any_value_, any_string_, any_number_, string_char_;
  std::map<std::string, RuleId> ref_rules_;   // $ref target -> its rule (recursion)
  std::map<std::string, Error> failed_refs_;  // $ref targets refused, with why
  struct Synthetic {
    simdjson::padded_string text;
    simdjson::dom::parser parser;
  };
  std::vector<std::unique_ptr<Synthetic>> synthetic_;  // merged schemas' documents
  int rule_counter_ = 0;

 public:
  RuleId new_rule(const std::string& hint) {
    return g_.add_rule(hint + "_" + std::to_string(rule_counter_++));
  }
};

// Keyword sets, for refusing what is not implemented.
bool is_annotation(std::string_view key);
std::string json_type_name(Json v);
bool json_equal(Json a, Json b);

// A count keyword's value (minItems, maxProperties, minContains...): a non-negative integer,
// else nullopt. Counts from 2^53 on are taken as 2^53, beyond every bound the grammar builds
// (a cast of a double beyond 2^64 to an integer is undefined behaviour: found by
// fuzz_json_schema, "maxItems": 1e300).
std::optional<std::uint64_t> json_count(Json value);
// A schema object's text from its keywords and their values' texts.
std::string schema_text(const std::vector<std::pair<std::string, std::string>>& keys);

// `s` as a JSON string literal: quotes, \" and \\ escaped, control bytes as \u00XX.
std::string json_string_literal(std::string_view s);

}  // namespace weft::grammar::detail
