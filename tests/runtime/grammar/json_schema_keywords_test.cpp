// The 2020-12 keywords of issue #21: each schema's accepted and rejected texts, and warnings.

#include <filesystem>
#include <fstream>
#include <iterator>

#include "runtime/grammar/json_schema_converter.hpp"
#include "runtime/grammar/json_schema_to_grammar.hpp"
#include "tests/runtime/grammar/grammar_test_util.hpp"

namespace weft::grammar {
namespace {

using testing::matches;

struct Case {
  const char* schema;
  std::vector<const char*> accept, reject;
};

void check(const std::vector<Case>& cases) {
  for (const auto& c : cases) {
    auto g = json_schema_to_grammar(c.schema);
    ASSERT_TRUE(g.ok()) << c.schema << ": " << g.error().what();
    for (const char* t : c.accept)
      EXPECT_TRUE(matches(*g, t)) << c.schema << " should accept " << t;
    for (const char* t : c.reject)
      EXPECT_FALSE(matches(*g, t)) << c.schema << " should reject " << t;
  }
}

TEST(JsonSchemaKeywords, AllOfOverAnyTypes) {
  check({
      {R"({"$defs":{"id":{"type":"string","pattern":"^[a-z]+$"}},"allOf":[{"$ref":"#/$defs/id"}]})",
       {"\"ab\""},
       {"\"AB\"", "1"}},
      {R"({"allOf":[{"type":"string"},{"maxLength":3}]})", {"\"abc\""}, {"\"abcd\"", "1"}},
      {R"({"allOf":[{"type":["integer","string"]},{"type":["number","null"]}],"minimum":2})",
       {"2", "30"},
       {"1", "2.5", "null", "\"a\""}},
      {R"({"allOf":[{"enum":["a","b","c"]},{"enum":["b","c","d"]}]})",
       {"\"b\"", "\"c\""},
       {"\"a\"", "\"d\""}},
      {R"({"allOf":[{"properties":{"a":{"type":"integer"}},"required":["a"]},
                    {"properties":{"a":{"minimum":5}}}]})",
       {"{\"a\":5}"},
       {"{\"a\":4}", "{}"}},
      // $ref beside other keywords is allOf of the two.
      {R"({"$defs":{"n":{"type":"integer"}},"$ref":"#/$defs/n","maximum":3})",
       {"3", "-1"},
       {"4", "\"a\""}},
  });
}

TEST(JsonSchemaKeywords, AnyOfBesideOtherKeywords) {
  check({{R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},
             "anyOf":[{"required":["a"]},{"required":["b"]}]})",
          {"{\"a\":1}", "{\"b\":\"x\"}", "{\"a\":1,\"b\":\"x\"}"},
          {"{}"}},
         // A branch that cannot match beside the rest is left out.
         {R"({"type":"string","anyOf":[{"type":"integer"},{"maxLength":1}]})",
          {"\"a\""},
          {"\"ab\"", "1"}}});
}

TEST(JsonSchemaKeywords, OneOfJudgesWhatValidatorsAccept) {
  // {"maxLength":0} generates strings but accepts any integer: 5 would match both branches.
  auto overlap = json_schema_to_grammar(R"({"oneOf":[{"maxLength":0},{"type":"integer"}]})");
  ASSERT_FALSE(overlap.ok());
  EXPECT_NE(std::string(overlap.error().what()).find("branches 0 and 1 may both match"),
            std::string::npos);
  auto all_of =
      json_schema_to_grammar(R"({"oneOf":[{"allOf":[{"type":"integer"}]},{"type":"number"}]})");
  ASSERT_FALSE(all_of.ok());
  // Strings of lengths that do not overlap are exclusive.
  check({{R"({"type":"string","oneOf":[{"maxLength":0},{"minLength":1,"format":"x-selector"}]})",
          {"\"\"", "\"a\""},
          {"1"}}});
}

TEST(JsonSchemaKeywords, IfThenElse) {
  check({
      // The else branch needs "not kind=a", which is not generated: only the then branch is.
      {R"({"type":"object","properties":{"kind":{"enum":["a","b"]},"n":{"type":"integer"}},
          "required":["kind"],
          "if":{"properties":{"kind":{"const":"a"}}},"then":{"required":["n"]}})",
       {"{\"kind\":\"a\",\"n\":1}"},
       {"{\"kind\":\"a\"}", "{\"kind\":\"b\",\"n\":1}"}},
      // A boolean's complement is finite: both branches.
      {R"({"type":"boolean","if":{"const":true},"then":{"const":true},"else":{"const":false}})",
       {"true", "false"},
       {"null"}},
  });
}

TEST(JsonSchemaKeywords, NotWhereTheComplementIsFinite) {
  check({{R"({"type":["boolean","null"],"not":{"const":true}})", {"false", "null"}, {"true"}},
         {R"({"not":{"type":["object","array","string","number"]}})",
          {"true", "null"},
          {"1", "\"a\"", "{}"}},
         {R"({"enum":[1,2,3],"not":{"enum":[2]}})", {"1", "3"}, {"2"}},
         {R"({"type":["string","integer"],"not":{"type":"integer"}})", {"\"a\""}, {"1"}}});
}

TEST(JsonSchemaKeywords, EnumAndConstMeetTheirSiblings) {
  check({{R"({"enum":["a","abc",1,null],"type":"string","maxLength":2})",
          {"\"a\""},
          {"\"abc\"", "1", "null"}},
         {R"({"const":{"a":[1,{"b":null}]}})", {"{\"a\":[1,{\"b\":null}]}"}, {"{\"a\":[1]}"}}});
}

// An enum or const beside a pattern keeps the values the pattern finds (a search, as in JSON
// Schema), checked with PCRE2. A pattern whose long back-reference number overflowed
// std::regex's compiler (undefined behaviour found by fuzz_json_schema, 2026-11-26) is refused
// or decided without it.
TEST(JsonSchemaKeywords, EnumAndConstMeetTheirPattern) {
  check({{R"({"enum":["ab","cd","xab"],"pattern":"^a"})", {"\"ab\""}, {"\"cd\"", "\"xab\""}},
         {R"({"enum":["ab","cd","xab"],"pattern":"b"})", {"\"ab\"", "\"xab\""}, {"\"cd\""}},
         {R"({"const":"été","pattern":"^\\w+$"})", {"\"été\""}, {"\"x\""}}});
  auto g = json_schema_to_grammar(
      R"({"const":"a7","pattern":"\\77777777777777777777777777777777777777"})");
  if (g.ok()) {
    EXPECT_FALSE(matches(*g, "\"b\""));
  }
}

// A pattern that is one repeated character, beside length limits: the intersection is
// generated. The shape is found by a scan: std::regex's matcher overflowed the stack on a
// 200 KB bracket class (a request's schema could crash the server).
TEST(JsonSchemaKeywords, RepeatedCharacterPatternBesideLengths) {
  check({{R"({"type":"string","pattern":"^[a-z]+$","maxLength":3})",
          {"\"abc\"", "\"a\""},
          {"\"abcd\"", "\"\"", "\"aB\""}},
         {R"({"type":"string","pattern":"^\\d{2,}$","maxLength":4})",
          {"\"12\"", "\"1234\""},
          {"\"1\"", "\"12345\"", "\"1a\""}},
         {R"({"type":"string","pattern":"^[\\]x]*$","minLength":2,"maxLength":2})",
          {"\"]x\"", "\"xx\""},
          {"\"x\"", "\"ab\""}},
         {R"({"type":"string","pattern":"^.{1,3}$","minLength":2})",
          {"\"ab\"", "\"abc\""},
          {"\"a\"", "\"abcd\""}}});
  const std::string huge =
      R"({"type":"string","maxLength":4,"pattern":"^[)" + std::string(200000, 'a') + R"(]+$"})";
  auto g = json_schema_to_grammar(huge);
  if (g.ok()) {
    EXPECT_TRUE(matches(*g, "\"aaaa\""));
    EXPECT_FALSE(matches(*g, "\"aaaaa\""));
  }
}

// Extra property names are walked along the declared names' trie: a long declared name no
// longer recurses once per byte (a 6 KB name overflowed the stack under ASan, found by
// fuzz_json_schema) and is not rescanned at every byte.
TEST(JsonSchemaKeywords, ExtraNamesBesideALongDeclaredName) {
  const std::string name(20000, 'n');
  const std::string schema = R"({"type":"object","properties":{")" + name +
                             R"(":{"type":"string"}},"additionalProperties":{"type":"integer"}})";
  auto g = json_schema_to_grammar(schema);
  ASSERT_TRUE(g.ok()) << g.error().what();
  EXPECT_TRUE(matches(*g, R"({")" + name + R"(":"x"})"));
  EXPECT_TRUE(matches(*g, R"({"a":1})"));
  EXPECT_TRUE(matches(*g, R"({")" + name.substr(1) + R"(":1})"));
  EXPECT_FALSE(matches(*g, R"({")" + name + R"(":1})"));
  EXPECT_FALSE(matches(*g, R"({"a":"x"})"));
}

// Every fuzz_json_schema finding (tests/fixtures/fuzz_findings/json_schema/) compiles or is
// refused with an error; under the asan preset, without undefined behaviour.
TEST(JsonSchemaKeywords, FuzzFindingsCompileOrFailCleanly) {
  const auto dir =
      std::filesystem::path(WEFT_SOURCE_DIR) / "tests/fixtures/fuzz_findings/json_schema";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string schema((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
    ++files;
    auto g = json_schema_to_grammar(schema);
    if (g.ok()) (void)flatten_grammar(*g);
  }
  EXPECT_GE(files, 10);
}

// A name given twice in one object: the object equals itself (compared occurrence by
// occurrence), so an if/then merge that meets it once keeps it instead of reporting two
// branches that disagree (which read a second branch that was not there: found by
// fuzz_json_schema on the dev VM, 2026-11-26, a heap-use-after-free under ASan).
TEST(JsonSchemaKeywords, NamesGivenTwiceInOneObject) {
  simdjson::dom::parser p1, p2;
  const auto text = simdjson::padded_string(std::string(R"({"a":1,"b":[2],"a":"x"})"));
  const auto same = simdjson::padded_string(std::string(R"({"a":1,"b":[2],"a":"x"})"));
  const auto swapped = simdjson::padded_string(std::string(R"({"a":"x","b":[2],"a":1})"));
  const auto once = simdjson::padded_string(std::string(R"({"a":1,"b":[2],"c":"x"})"));
  simdjson::dom::element x = p1.parse(text).value();
  EXPECT_TRUE(detail::json_equal(x, x));
  simdjson::dom::parser p3, p4;
  EXPECT_TRUE(detail::json_equal(x, p2.parse(same).value()));
  EXPECT_FALSE(detail::json_equal(x, p3.parse(swapped).value()));
  EXPECT_FALSE(detail::json_equal(x, p4.parse(once).value()));

  // The outer if/then merges {"if": X} with then, X naming minLength twice.
  auto g = json_schema_to_grammar(
      R"({"if":{"if":{"minLength":2,"minLength":3}},"then":{"type":"string","maxLength":4}})");
  ASSERT_TRUE(g.ok()) << g.error().what();
  EXPECT_TRUE(matches(*g, R"("abc")"));
  EXPECT_FALSE(matches(*g, R"("abcdef")"));
}

// Counts beyond every bound (found by fuzz_json_schema, 2026-11-26: "maxItems": 1e300 and
// "maxProperties": 5.02e23 were cast to integers, undefined behaviour): refused with an error
// naming the keyword, as any count beyond what the grammar builds is; a fraction is an error.
TEST(JsonSchemaKeywords, HugeCounts) {
  for (const char* schema : {R"({"type":"array","items":{"type":"integer"},"maxItems":1e300})",
                             R"({"type":"array","minItems":1e300})",
                             R"({"type":"array","contains":{},"minContains":1e300})",
                             R"({"type":"object","maxProperties":5.02e23})",
                             R"({"type":"object","minProperties":1e20})"}) {
    SCOPED_TRACE(schema);
    auto g = json_schema_to_grammar(schema);
    if (g.ok()) continue;
    const std::string what = g.error().what();
    EXPECT_TRUE(what.find("Items") != std::string::npos ||
                what.find("Properties") != std::string::npos ||
                what.find("Contains") != std::string::npos)
        << what;
  }
  auto props = json_schema_to_grammar(R"({"type":"object","maxProperties":1e300})");
  if (props.ok()) EXPECT_TRUE(matches(*props, R"({"a":1})"));
  auto fraction = json_schema_to_grammar(R"({"type":"array","maxItems":2.5})");
  ASSERT_FALSE(fraction.ok());
  EXPECT_NE(std::string(fraction.error().what()).find("maxItems must be a non-negative integer"),
            std::string::npos)
      << fraction.error().what();
}

TEST(JsonSchemaKeywords, MinAndMaxProperties) {
  check({{R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},
             "c":{"type":"integer"}},"minProperties":1,"maxProperties":2})",
          {"{\"a\":1}", "{\"a\":1,\"c\":3}", "{\"b\":2,\"c\":3}"},
          {"{}", "{\"a\":1,\"b\":2,\"c\":3}"}},
         {R"({"type":"object","additionalProperties":{"type":"integer"},"minProperties":1,
             "maxProperties":2})",
          {"{\"x\":1}", "{\"x\":1,\"y\":2}"},
          {"{}", "{\"x\":1,\"y\":2,\"z\":3}"}}});
}

TEST(JsonSchemaKeywords, ExtraNamesAreNotDeclaredOnes) {
  check({{R"({"type":"object","properties":{"a":{"type":"integer"}},
             "additionalProperties":{"type":"string"}})",
          {"{\"a\":1,\"b\":\"x\"}", "{\"ab\":\"x\"}", "{\"\":\"x\"}"},
          {"{\"a\":\"x\"}", "{\"a\":1,\"a\":\"x\"}"}}});
}

TEST(JsonSchemaKeywords, DependentRequired) {
  check({{R"({"type":"object","properties":{"card":{"type":"string"},"address":{"type":"string"}},
             "dependentRequired":{"card":["address"]}})",
          {"{}", "{\"address\":\"x\"}", "{\"card\":\"1\",\"address\":\"x\"}"},
          {"{\"card\":\"1\"}"}}});
}

TEST(JsonSchemaKeywords, UniqueItems) {
  check({
      // Few values: every subset in any order.
      {R"({"type":"array","items":{"enum":["a","b","c"]},"uniqueItems":true})",
       {"[]", "[\"c\",\"a\"]", "[\"b\",\"a\",\"c\"]"},
       {"[\"a\",\"a\"]", "[\"a\",\"b\",\"c\",\"a\"]"}},
      {R"({"type":"array","items":{"type":"boolean"},"uniqueItems":true,"minItems":2})",
       {"[true,false]", "[false,true]"},
       {"[true]", "[true,true]"}},
      // Many values: each at most once, in the enum's order.
      {R"({"type":"array","items":{"enum":[1,2,3,4,5,6,7]},"uniqueItems":true,"maxItems":3})",
       {"[1,5,7]", "[]"},
       {"[5,1]", "[1,1]", "[1,2,3,4]"}},
      // Anything else: at most one element.
      {R"({"type":"array","items":{"type":"string"},"uniqueItems":true})",
       {"[]", "[\"x\"]"},
       {"[\"x\",\"y\"]"}},
  });
}

TEST(JsonSchemaKeywords, ContainsAndPrefixItems) {
  check(
      {{R"({"type":"array","items":{"type":"integer"},"contains":{"minimum":10},"minContains":2})",
        {"[10,11]", "[10,20,1]"},
        {"[10]", "[1,10,10]", "[]"}},
       {R"({"type":"array","prefixItems":[{"type":"string"}],"items":{"type":"integer"},
             "contains":{"const":"k"}})",
        {"[\"k\"]", "[\"k\",1]"},
        {"[\"j\"]", "[]"}}});
}

TEST(JsonSchemaKeywords, FormatsAndLengths) {
  std::vector<std::string> warnings;
  JsonGrammarOptions o;
  o.warnings = &warnings;
  auto g = json_schema_to_grammar(R"({"type":"string","format":"x-custom","maxLength":2})", o);
  ASSERT_TRUE(g.ok()) << g.error().what();
  EXPECT_TRUE(matches(*g, "\"ab\""));
  EXPECT_FALSE(matches(*g, "\"abc\""));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], "JSON Schema at '#/format': unknown format 'x-custom' is not enforced");
  check({{R"({"type":"string","format":"date","maxLength":10,"minLength":10})",
          {"\"2024-01-31\""},
          {"\"x\""}},
         {R"({"type":"string","format":"hostname"})",
          {"\"example.com\"", "\"a\""},
          {"\"-a.com\"", "\"a_b\""}}});
  // One repeated character: the pattern's bounds and the lengths intersected.
  check({{R"({"type":"string","pattern":"^[a-z0-9_-]+$","maxLength":3})",
          {"\"a\"", "\"a_9\""},
          {"\"\"", "\"abcd\"", "\"A\""}},
         {R"({"type":"string","pattern":"^\\d{2,}$","minLength":3,"maxLength":4})",
          {"\"123\"", "\"1234\""},
          {"\"12\"", "\"12345\"", "\"12a\""}},
         {R"({"type":"string","pattern":"^.*$","minLength":1,"maxLength":2})",
          {"\"\\\"\"", "\"ab\""},
          {"\"\"", "\"abc\""}}});
  // Every alternative anchored at its start: the anchor is hoisted out of the group.
  check({{R"j({"type":"string","pattern":"(?:^@[a-z]+/[a-z]+|^[a-z][^:]*)$"})j",
          {"\"@scope/pkg\"", "\"pkg\"", "\"pkg-x\""},
          {"\"1abc\"", "\"a:b\"", "\"@Scope/pkg\""}},
         {R"j({"type":"string","pattern":"(^a|^b)"})j", {"\"a\"", "\"bcd\""}, {"\"ca\""}}});
  auto none = json_schema_to_grammar(R"({"type":"string","pattern":"^a{5}$","maxLength":3})");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(std::string(none.error().what()).find("nothing matches"), std::string::npos);
  auto bad = json_schema_to_grammar(R"({"type":"string","format":"email","maxLength":10})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.error().what()).find("unsupported keyword 'maxLength' beside 'format'"),
            std::string::npos)
      << bad.error().what();
}

}  // namespace
}  // namespace weft::grammar
