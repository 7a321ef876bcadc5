// oneOf is generated only where its branches provably cannot both match a value.

#include <gtest/gtest.h>

#include "runtime/grammar/json_schema_to_grammar.hpp"
#include "tests/runtime/grammar/grammar_test_util.hpp"

namespace weft::grammar {
namespace {

void expect_exclusive(std::string_view schema) {
  auto g = json_schema_to_grammar(schema);
  EXPECT_TRUE(g.ok()) << schema << ": " << (g.ok() ? "" : g.error().what());
}

void expect_refused(std::string_view schema, std::string_view needle) {
  auto g = json_schema_to_grammar(schema);
  ASSERT_FALSE(g.ok()) << "expected oneOf to be refused: " << schema;
  EXPECT_NE(std::string(g.error().what()).find(needle), std::string::npos) << g.error().what();
}

TEST(JsonSchemaOneOf, ExclusiveBranchesAreGenerated) {
  // Different types (integer vs number-with-fraction stays ambiguous, so not used here).
  expect_exclusive(R"({"oneOf":[{"type":"string"},{"type":"integer"},{"type":"null"}]})");
  // Distinct values.
  expect_exclusive(R"({"oneOf":[{"const":"a"},{"enum":["b","c"]},{"const":1}]})");
  // A value against a type it cannot have.
  expect_exclusive(R"({"oneOf":[{"const":"a"},{"type":"array"}]})");
  // A discriminator: a required property with distinct const values.
  expect_exclusive(R"({"oneOf":[
    {"type":"object","properties":{"kind":{"const":"cat"},"lives":{"type":"integer"}},"required":["kind"]},
    {"type":"object","properties":{"kind":{"enum":["dog","wolf"]}},"required":["kind"]}]})");
  // A required property the other branch forbids.
  expect_exclusive(R"({"oneOf":[
    {"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false},
    {"type":"object","properties":{"b":{"type":"integer"}},"required":["b"],"additionalProperties":false}]})");
  // Through $ref.
  expect_exclusive(R"({"$defs":{"s":{"type":"string"},"n":{"type":"null"}},
    "oneOf":[{"$ref":"#/$defs/s"},{"$ref":"#/$defs/n"}]})");
  // 1 and 1.0 are the same JSON value.
  expect_refused(R"({"oneOf":[{"const":1},{"const":1.0}]})", "branches 0 and 1");
}

TEST(JsonSchemaOneOf, PossiblyOverlappingBranchesAreRefused) {
  expect_refused(R"({"oneOf":[{"type":"integer"},{"type":"number"}]})",
                 "JSON Schema at '#/oneOf': branches 0 and 1 may both match one value");
  expect_refused(R"({"oneOf":[{"type":"string","maxLength":3},{"type":"string","pattern":"^a"}]})",
                 "use anyOf");
  // Objects without additionalProperties:false accept each other's properties.
  expect_refused(R"({"oneOf":[
    {"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
    {"type":"object","properties":{"b":{"type":"integer"}},"required":["b"]}]})",
                 "branches 0 and 1");
  expect_refused(R"({"type":"object","properties":{"x":{"oneOf":[{},{"type":"null"}]}}})",
                 "'#/properties/x/oneOf'");
  // anyOf is never refused for overlap.
  expect_exclusive(R"({"anyOf":[{"type":"integer"},{"type":"number"}]})");
}

// Found by tests/fuzz/fuzz_json_schema: an object branch with "required" but no "properties"
// read an element that had no document (a null dereference).
TEST(JsonSchemaOneOf, RequiredWithoutProperties) {
  expect_exclusive(R"({"oneOf":[{"type":"object","required":["a"]},{"type":"string"}]})");
  expect_refused(R"({"type":"array","items":{"oneOf":[
    {"type":"object","propertiez":{"t":{"type":"string"}},"required":["t"]},
    {"type":"object","properties":{"i":{"type":"string"}},"required":["i"]}]}})",
                 "'#/items/oneOf': branches 0 and 1 may both match");
}

}  // namespace
}  // namespace weft::grammar
