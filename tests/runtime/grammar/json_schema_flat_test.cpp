// A JSON Schema is flattened once on its way to a CompiledGrammar: the converter keeps the flat
// form it checked (json_schema_to_flat_grammar, flat_grammar_for), and that form must be the
// one flattening the converted grammar again gives, on every schema the repository holds, with
// the same errors where the schema is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/grammar/constraint_compiler.hpp"
#include "runtime/grammar/grammar_compiler.hpp"
#include "runtime/grammar/json_schema_to_grammar.hpp"
#include "runtime/grammar/tool_call_grammar.hpp"

namespace weft::grammar {
namespace {

namespace fs = std::filesystem;

struct Schema {
  std::string name;
  std::string text;
};

// The schemas of the corpus tests and the real-world fixtures, and a few refused only by the
// flattening's checks (left recursion through $ref, an object that requires itself).
std::vector<Schema> schemas() {
  std::vector<Schema> out;
  const fs::path root(WEFT_SOURCE_DIR);
  for (const char* dir : {"tests/tools/grammar/schemas", "tests/tools/grammar/unsupported",
                          "tests/fixtures/schemas/real-world"}) {
    std::vector<fs::path> paths;
    for (const auto& entry : fs::recursive_directory_iterator(root / dir))
      if (entry.is_regular_file() && entry.path().extension() == ".json")
        paths.push_back(entry.path());
    std::sort(paths.begin(), paths.end());
    for (const auto& path : paths) {
      std::ifstream in(path, std::ios::binary);
      std::ostringstream text;
      text << in.rdbuf();
      out.push_back({fs::relative(path, root).string(), text.str()});
    }
  }
  out.push_back({"left recursion", R"({"$ref": "#"})"});
  out.push_back({"left recursion in anyOf", R"({"anyOf": [{"$ref": "#"}, {"type": "null"}]})"});
  out.push_back({"requires itself",
                 R"({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]})"});
  return out;
}

TEST(JsonSchemaFlat, KeptFlatFormEqualsFlatteningTheGrammarAgain) {
  const auto all = schemas();
  ASSERT_GT(all.size(), 200u);  // the two folders of schemas were found
  int compiled = 0, refused_by_flattening = 0;
  for (const bool flexible : {false, true}) {
    for (const auto& s : all) {
      SCOPED_TRACE(s.name + (flexible ? " (flexible whitespace)" : ""));
      JsonGrammarOptions options;
      options.flexible_whitespace = flexible;
      auto grammar = json_schema_to_grammar(s.text, options);
      auto flat = json_schema_to_flat_grammar(s.text, options);
      ASSERT_EQ(static_cast<bool>(grammar), static_cast<bool>(flat));
      if (!grammar) {
        EXPECT_EQ(grammar.error().code(), flat.error().code());
        EXPECT_STREQ(grammar.error().what(), flat.error().what());
        refused_by_flattening += std::string(flat.error().what()).starts_with("JSON Schema: ");
        continue;
      }
      auto again = flatten_grammar(*grammar);
      ASSERT_TRUE(again) << again.error().what();
      EXPECT_TRUE(*flat == *again);
      ++compiled;
    }
  }
  EXPECT_GT(compiled, 2 * 150);
  EXPECT_EQ(refused_by_flattening, 2 * 3);
}

// ConstraintCompiler's path: the format's options reach the converter as they do through
// grammar_for, for JSON Schema (flattened once) and the other formats (flattened here).
TEST(JsonSchemaFlat, FlatGrammarForMatchesGrammarFor) {
  std::vector<ResponseFormat> formats;
  for (const bool flexible : {false, true}) {
    for (const bool strict : {true, false}) {
      ResponseFormat f;
      f.type = ResponseFormat::Type::kJsonSchema;
      f.flexible_whitespace = flexible;
      f.strict = strict;
      // Strict: uniqueItems allows at most one such item, multipleOf is refused; otherwise
      // both are skipped.
      f.source = R"({"type": "array", "items": {"type": "integer"}, "uniqueItems": true})";
      formats.push_back(f);
      f.source = R"({"type": "integer", "multipleOf": 3})";
      formats.push_back(f);
      f.source = R"({"type": "object", "properties": {"a": {"type": "string"}}})";
      formats.push_back(f);
    }
  }
  ResponseFormat object;
  object.type = ResponseFormat::Type::kJsonObject;
  formats.push_back(object);
  ResponseFormat regex;
  regex.type = ResponseFormat::Type::kRegex;
  regex.source = "(yes|no)[0-9]{2,40}";
  formats.push_back(regex);
  ResponseFormat ebnf;
  ebnf.type = ResponseFormat::Type::kGrammar;
  ebnf.source = "root ::= \"[\" item (\",\" item)* \"]\"\nitem ::= [0-9]+\n";
  formats.push_back(ebnf);
  // EBNF and tool calls also keep the flat form they checked (parse_ebnf_flat,
  // tool_call_flat_grammar); a left-recursive grammar is refused alike.
  ebnf.source = "root ::= root \"a\" | \"b\"\n";
  formats.push_back(ebnf);
  for (const auto format : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json}) {
    ToolCallSpec spec;
    spec.format = format;
    spec.required = format == ToolCallFormat::kHermes;
    spec.functions.push_back(
        {0, "get_weather", R"({"type":"object","properties":{"city":{"type":"string"}}})", false});
    spec.functions.push_back({1, "now", "", false});
    ResponseFormat tools;
    tools.type = ResponseFormat::Type::kToolCalls;
    tools.source = tool_call_spec_json(spec);
    formats.push_back(tools);
  }
  int refused = 0;
  for (const auto& f : formats) {
    SCOPED_TRACE(f.source + (f.flexible_whitespace ? " flexible" : "") +
                 (f.strict ? " strict" : ""));
    auto grammar = grammar_for(f);
    auto flat = flat_grammar_for(f);
    ASSERT_EQ(static_cast<bool>(grammar), static_cast<bool>(flat));
    if (!grammar) {
      EXPECT_STREQ(grammar.error().what(), flat.error().what());
      ++refused;
      continue;
    }
    auto again = flatten_grammar(*grammar);
    ASSERT_TRUE(again) << again.error().what();
    EXPECT_TRUE(*flat == *again);
  }
  EXPECT_EQ(refused, 3);  // the strict multipleOf schemas and the left-recursive grammar
}

}  // namespace
}  // namespace weft::grammar
