#include <cmath>

#include "runtime/grammar/json_schema_to_grammar.hpp"
#include "tests/runtime/grammar/grammar_test_util.hpp"

namespace weft::grammar {
namespace {

using testing::matches;

Grammar schema(std::string_view json, JsonGrammarOptions o = {}) {
  auto g = json_schema_to_grammar(json, o);
  EXPECT_TRUE(g.ok()) << json << ": " << (g.ok() ? "" : g.error().what());
  return g.ok() ? std::move(*g) : Grammar{};
}

struct Case {
  const char* schema;
  std::vector<const char*> accept, reject;
};

TEST(JsonSchema, AcceptsAndRejects) {
  const std::vector<Case> cases = {
      {R"({"type":"null"})", {"null"}, {"nul", "0"}},
      // An enum value beyond long long's range: its type is "number" (the check converted it
      // to long long first, undefined behaviour that fuzz_openai_request found under UBSan).
      {R"({"enum":[1e300,2]})", {"2"}, {"3"}},
      {R"({"type":"boolean"})", {"true", "false"}, {"True", "1"}},
      {R"({"type":["string","null"]})", {"null", "\"a\""}, {"1"}},
      {R"({"type":"string"})",
       {"\"\"", "\"a\\\"b\\\\\\n\\u00e9\"", "\"\xE2\x82\xAC\""},
       {"\"a", "\"\n\"", "\"\\x\""}},
      {R"({"type":"string","minLength":2,"maxLength":3})",
       {"\"ab\"", "\"a\\nb\"", "\"\xC3\xA9\xC3\xA9\""},
       {"\"a\"", "\"abcd\""}},
      {R"({"type":"string","pattern":"^[A-Z]{2}\\d$"})", {"\"AB1\""}, {"\"ab1\"", "\"AB12\""}},
      {R"({"type":"string","pattern":"cat"})", {"\"cat\"", "\"a cat!\""}, {"\"ca\""}},
      {R"({"type":"string","format":"date"})",
       {"\"2024-02-29\"", "\"2023-12-31\"", "\"2000-02-29\""},
       {"\"2023-02-29\"", "\"1900-02-29\"", "\"2024-04-31\"", "\"2024-13-01\"", "\"24-01-01\""}},
      {R"({"type":"string","format":"time"})",
       {"\"23:59:59Z\"", "\"08:00:00.5+02:00\""},
       {"\"24:00:00Z\"", "\"08:00:00\""}},
      {R"({"type":"string","format":"date-time"})",
       {"\"2024-01-02T03:04:05Z\""},
       {"\"2024-01-02 03:04:05Z\""}},
      {R"({"type":"string","format":"email"})",
       {"\"a.b+c@ex-ample.co.uk\""},
       {"\"a@b\"", "\"@b.com\"", "\"a@-b.com\""}},
      {R"({"type":"string","format":"uuid"})",
       {"\"123e4567-e89b-12d3-a456-426614174000\""},
       {"\"123e4567e89b12d3a456426614174000\""}},
      {R"({"type":"string","format":"ipv4"})",
       {"\"192.168.0.255\"", "\"0.0.0.0\""},
       {"\"256.1.1.1\"", "\"01.1.1.1\"", "\"1.1.1\""}},
      {R"({"type":"string","format":"uri"})",
       {"\"https://example.com/a?b=c#d\"", "\"urn:isbn:0451450523\""},
       {"\"no scheme\"", "\"http://a b\""}},
      {R"({"type":"integer"})", {"0", "-12", "345"}, {"01", "-0x", "1.5", "-"}},
      {R"({"type":"number"})", {"0", "-1.5", "2e10", "3.25E-3"}, {".5", "1.", "01", "1e"}},
      {R"({"enum":["a",1,null,{"k":[true]}]})",
       {"\"a\"", "1", "null", "{\"k\":[true]}"},
       {"\"b\"", "2"}},
      {R"({"type":"string","enum":["a",1]})", {"\"a\""}, {"1"}},
      {R"({"const":"fixed"})", {"\"fixed\""}, {"\"other\""}},
      {R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":1}]})",
       {"5", "\"x\""},
       {"\"xy\"", "true"}},
      {R"({"oneOf":[{"type":"boolean"},{"type":"null"}]})", {"true", "null"}, {"0"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a"]})",
       {"{\"a\":1}", "{\"a\":1,\"b\":\"x\"}"},
       {"{}", "{\"b\":\"x\"}", "{\"a\":1,}", "{\"b\":\"x\",\"a\":1}", "{\"a\":1,\"c\":2}"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}}})",
       {"{}", "{\"a\":1}", "{\"b\":2}", "{\"a\":1,\"b\":2}"},
       {"{,\"b\":2}", "{\"a\":1\"b\":2}"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"boolean"}})",
       {"{\"a\":1,\"x\":true}", "{\"x\":false,\"y\":true}", "{}"},
       {"{\"x\":1}"}},
      {R"({"type":"object","additionalProperties":true})", {"{\"any\":[1,{\"x\":null}]}"}, {"[]"}},
      {R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})",
       {"[1]", "[1,2,3]"},
       {"[]", "[1,2,3,4]", "[1,]"}},
      {R"({"type":"array","items":{"type":"integer"},"minItems":2})",
       {"[1,2]", "[1,2,3,4,5]"},
       {"[1]"}},
      {R"({"type":"array"})", {"[]", "[1,\"a\",[null]]"}, {"[1,]"}},
      {R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}]})",
       {"[]", "[\"a\"]", "[\"a\",1]"},
       {"[1]", "[\"a\",1,2]"}},
      {R"({"type":"array","prefixItems":[{"type":"string"}],"items":{"type":"integer"},"minItems":2})",
       {"[\"a\",1]", "[\"a\",1,2]"},
       {"[\"a\"]", "[\"a\",\"b\"]"}},
      {R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"$ref":"#/$defs/node"}},"required":["v"]}},"$ref":"#/$defs/node"})",
       {"{\"v\":1}", "{\"v\":1,\"next\":{\"v\":2,\"next\":{\"v\":3}}}"},
       {"{\"v\":1,\"next\":{}}"}},
      {R"({"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#"}}}})",
       {"{}", "{\"children\":[{},{\"children\":[]}]}"},
       {"{\"children\":[1]}"}},
      {R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"b":{"type":"string"}},"required":["b"]}]})",
       {"{\"a\":1,\"b\":\"x\"}"},
       {"{\"a\":1}", "{\"b\":\"x\"}"}},
      {R"({"allOf":[{"$ref":"#/definitions/base"}],"definitions":{"base":{"type":"integer","minimum":3}}})",
       {"3", "40"},
       {"2"}},
      {R"({})", {"1", "{\"a\":[]}", "\"s\""}, {""}},
      {R"(true)", {"null"}, {}},
  };
  for (const auto& c : cases) {
    Grammar g = schema(c.schema);
    for (const char* s : c.accept)
      EXPECT_TRUE(matches(g, s)) << c.schema << " should accept " << s;
    for (const char* s : c.reject)
      EXPECT_FALSE(matches(g, s)) << c.schema << " should reject " << s;
  }
}

TEST(JsonSchema, IntegerBoundsAreExact) {
  const std::vector<std::tuple<std::string, long long, long long>> ranges = {
      {R"("minimum":0,"maximum":100)", 0, 100},
      {R"("minimum":-37,"maximum":215)", -37, 215},
      {R"("exclusiveMinimum":-5,"exclusiveMaximum":5)", -4, 4},
      {R"("minimum":-120,"maximum":-15)", -120, -15},
      {R"("minimum":7,"maximum":7)", 7, 7},
      {R"("minimum":99,"maximum":1001)", 99, 1001},
      {R"("minimum":1.5,"maximum":9.5)", 2, 9},
  };
  for (const auto& [bounds, lo, hi] : ranges) {
    Grammar g = schema("{\"type\":\"integer\"," + bounds + "}");
    for (long long v = lo - 150; v <= hi + 150; ++v)
      EXPECT_EQ(matches(g, std::to_string(v)), v >= lo && v <= hi) << bounds << " value " << v;
  }
  Grammar lower = schema(R"({"type":"integer","minimum":-20})");
  for (long long v : {-21LL, -20LL, -1LL, 0LL, 5LL, 123456789LL})
    EXPECT_EQ(matches(lower, std::to_string(v)), v >= -20) << v;
  EXPECT_FALSE(matches(lower, "-0"));
  Grammar upper = schema(R"({"type":"integer","exclusiveMaximum":-3})");
  for (long long v : {-123456LL, -4LL, -3LL, 0LL, 8LL})
    EXPECT_EQ(matches(upper, std::to_string(v)), v < -3) << v;
}

TEST(JsonSchema, NumberBoundsAreExact) {
  struct B {
    const char* bounds;
    double lo;
    bool lo_ex;
    double hi;
    bool hi_ex;
  };
  const std::vector<B> cases = {
      {R"("minimum":0,"maximum":1)", 0, false, 1, false},
      {R"("exclusiveMinimum":0,"exclusiveMaximum":10)", 0, true, 10, true},
      {R"("minimum":-3,"exclusiveMaximum":-1)", -3, false, -1, true},
      {R"("exclusiveMinimum":-2,"maximum":2)", -2, true, 2, false}};
  const std::vector<std::string> values = {"0",    "0.0",   "0.5",  "1",     "1.0", "1.01",
                                           "-0.5", "-1",    "-1.0", "-1.5",  "-2",  "-2.0",
                                           "-2.5", "-3",    "-3.0", "-3.01", "2",   "2.00",
                                           "2.5",  "9.999", "10",   "10.0",  "11",  "-0.0001"};
  for (const auto& c : cases) {
    Grammar g = schema(std::string("{\"type\":\"number\",") + c.bounds + "}");
    for (const auto& v : values) {
      double x = std::stod(v);
      bool in = (c.lo_ex ? x > c.lo : x >= c.lo) && (c.hi_ex ? x < c.hi : x <= c.hi);
      EXPECT_EQ(matches(g, v), in) << c.bounds << " value " << v;
    }
  }
}

TEST(JsonSchema, WhitespaceIsCompactByDefaultAndConfigurable) {
  const char* s =
      R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}},"required":["a"]})";
  EXPECT_TRUE(matches(schema(s), "{\"a\":[1,2]}"));
  EXPECT_FALSE(matches(schema(s), "{ \"a\": [1, 2] }"));
  JsonGrammarOptions flexible;
  flexible.flexible_whitespace = true;
  flexible.max_whitespace = 4;
  EXPECT_TRUE(matches(schema(s, flexible), "{ \"a\" : [ 1 ,\n\t2 ] }"));
  EXPECT_TRUE(matches(schema(s, flexible), "{\"a\":[1,2]}"));
  EXPECT_FALSE(matches(schema(s, flexible), "{     \"a\":[1,2]}"));  // past max_whitespace
}

TEST(JsonSchema, JsonModeIsAnyObject) {
  Grammar g = json_object_grammar();
  EXPECT_TRUE(matches(g, "{}"));
  EXPECT_TRUE(matches(g, "{\"a\":[1,-2.5e3,\"x\",{\"b\":null}],\"c\":true}"));
  EXPECT_FALSE(matches(g, "[]"));
  EXPECT_FALSE(matches(g, "{\"a\":}"));
}

void expect_error(std::string_view json, std::string_view needle) {
  auto g = json_schema_to_grammar(json);
  ASSERT_FALSE(g.ok()) << "expected an error for " << json;
  EXPECT_NE(std::string(g.error().what()).find(needle), std::string::npos)
      << "error '" << g.error().what() << "' lacks '" << needle << "'";
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  expect_error(R"({"type":"number","multipleOf":3})", "unsupported keyword 'multipleOf'");
  expect_error(
      R"({"type":"object","properties":{"a":{"type":"array","uniqueItems":true,"minItems":2}}})",
      "at '#/properties/a': unsupported keyword 'uniqueItems': with minItems above 1");
  expect_error(R"({"type":"string","not":{"const":"a"}})", "unsupported keyword 'not'");
  expect_error(R"({"type":"object","patternProperties":{"^x":{}}})",
               "unsupported keyword 'patternProperties'");
  expect_error(R"({"type":"string","format":"ipv6"})", "at '#/format': unsupported format 'ipv6'");
  expect_error(R"({"type":"object","minProperties":1})", "unsupported keyword 'minProperties'");
  expect_error(R"({"allOf":[{"pattern":"a"},{"pattern":"b"}]})",
               "unsupported keyword 'pattern': constrained differently by two allOf branches");
  expect_error(R"({"type":"string","pattern":"a","maxLength":3})",
               "unsupported keyword 'maxLength' beside 'pattern'");
  expect_error(R"({"type":"array","contains":{"const":1},"maxContains":2})",
               "unsupported keyword 'maxContains'");
}

TEST(JsonSchema, UnsatisfiableAndInvalidSchemasAreRefused) {
  expect_error(R"({"type":"array","minItems":3,"maxItems":2})", "nothing matches");
  expect_error(R"({"enum":[]})", "enum has no value");
  expect_error(R"({"type":"integer","enum":["a"]})", "enum has no value");
  expect_error(R"({"type":"string","minLength":5,"maxLength":2})",
               "minLength 5 exceeds maxLength 2");
  expect_error(R"({"type":"integer","minimum":5,"maximum":4})",
               "no integer lies within the bounds");
  expect_error(R"({"type":"integer","exclusiveMinimum":4,"exclusiveMaximum":5})",
               "no integer lies within the bounds");
  expect_error(R"({"type":"number","minimum":2,"exclusiveMaximum":2})", "nothing matches");
  expect_error(R"({"type":"object","properties":{"a":false},"required":["a"]})", "matches nothing");
  expect_error(R"({"type":"object","required":["a"],"additionalProperties":false})",
               "required property 'a'");
  expect_error(R"({"anyOf":[]})", "anyOf is empty");
  expect_error(R"({"type":"strin"})", "unknown type 'strin'");
  expect_error(R"({"$ref":"#/$defs/missing"})", "does not resolve");
  expect_error(R"({"$ref":"http://example.com/s.json"})", "not local");
  expect_error(R"({"type":"string",)", "not valid JSON");
  expect_error(R"(42)", "must be an object or a boolean");
  expect_error(R"({"type":"string","pattern":"a(b"})", "#/pattern");
  expect_error(
      R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},"$ref":"#/$defs/a"})",
      "left-recursive");
  expect_error(R"({"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})", "can never finish");
}

TEST(JsonSchema, DeepSchemasAreRefusedNotOverflowed) {
  std::string deep;
  for (int i = 0; i < 10000; ++i)
    deep += R"({"type":"array","items":)";
  deep += "{}";
  for (int i = 0; i < 10000; ++i)
    deep += "}";
  auto g = json_schema_to_grammar(deep);
  EXPECT_FALSE(g.ok());
}

}  // namespace
}  // namespace weft::grammar

namespace weft::grammar {
namespace {

// Mutated schemas (bytes flipped, inserted, deleted) either convert or fail with an error;
// whatever converts also compiles or fails cleanly.
TEST(JsonSchema, MutatedSchemasNeverCrash) {
  const std::vector<std::string> seeds = {
      R"({"type":"object","properties":{"a":{"type":"integer","minimum":-5,"maximum":70},"b":{"type":"array","items":{"$ref":"#/$defs/s"},"maxItems":4}},"required":["a"],"$defs":{"s":{"type":"string","pattern":"^[a-z]{1,3}$"}}})",
      R"({"anyOf":[{"type":"number","exclusiveMinimum":0},{"enum":["x",null,true]},{"type":"string","format":"date-time"}]})",
      R"({"allOf":[{"properties":{"k":{"const":1}},"required":["k"]},{"type":"object","additionalProperties":false,"properties":{"k":{"const":1}}}]})",
  };
  std::mt19937 rng(3);
  const std::string bytes = "{}[]\":,0123456789-.eabcdefghijklmnopqrstuvwxyz$#/^*+?()\\ ";
  for (int i = 0; i < 3000; ++i) {
    std::string s = seeds[i % seeds.size()];
    for (int n = 1 + rng() % 3; n-- > 0;) {
      std::size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0:
          s[at] = bytes[rng() % bytes.size()];
          break;
        case 1:
          s.insert(at, 1, bytes[rng() % bytes.size()]);
          break;
        default:
          s.erase(at, 1);
          break;
      }
    }
    auto g = json_schema_to_grammar(s);
    if (g.ok()) {
      auto flat = flatten_grammar(*g);
      EXPECT_TRUE(flat.ok()) << s << ": " << flat.error().what();
    } else {
      EXPECT_FALSE(std::string(g.error().what()).empty());
    }
  }
}

}  // namespace
}  // namespace weft::grammar
