#include "runtime/grammar/tool_call_grammar.hpp"

#include <chrono>
#include <iostream>

#include "runtime/grammar/grammar_matcher.hpp"
#include "runtime/grammar/json_schema_to_grammar.hpp"
#include "tests/runtime/grammar/grammar_test_util.hpp"

namespace weft::grammar {
namespace {

using testing::matches;

const char* kWeather =
    R"({"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city"]})";

ToolCallSpec spec(ToolCallFormat format, bool required, bool parallel) {
  ToolCallSpec s;
  s.format = format;
  s.required = required;
  s.parallel = parallel;
  s.functions.push_back({0, "get_weather", kWeather, false});
  s.functions.push_back({1, "now", "", false});
  return s;
}

Grammar build(const ToolCallSpec& s) {
  auto g = tool_call_grammar(s);
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().what());
  return g.ok() ? std::move(*g) : Grammar{};
}

TEST(ToolCallGrammar, HermesRequired) {
  Grammar g = build(spec(ToolCallFormat::kHermes, true, false));
  EXPECT_TRUE(matches(g,
                      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                      "{\"city\":\"Oslo\"}}\n</tool_call>"));
  EXPECT_TRUE(matches(
      g,
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\",\"days\":3}}\n"
      "</tool_call>"));
  EXPECT_TRUE(matches(g, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  // Arguments follow the function's schema: required city, days within [1, 7].
  EXPECT_FALSE(
      matches(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(matches(
      g,
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\",\"days\":9}}"
      "\n</tool_call>"));
  EXPECT_FALSE(matches(g, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(matches(g, "Sure, here is the weather."));
  EXPECT_FALSE(matches(g, ""));
  // One call only without parallel calls.
  EXPECT_FALSE(matches(g,
                       "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n"
                       "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
}

TEST(ToolCallGrammar, HermesParallel) {
  Grammar g = build(spec(ToolCallFormat::kHermes, true, true));
  EXPECT_TRUE(matches(g,
                      "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n"
                      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"x\"}}"
                      "\n</tool_call>"));
}

TEST(ToolCallGrammar, HermesAutoAllowsTextWithoutTheMarker) {
  Grammar g = build(spec(ToolCallFormat::kHermes, false, true));
  EXPECT_TRUE(matches(g, ""));
  EXPECT_TRUE(matches(g, "It is sunny. <b>bold</b> a<tool and <<tool_cal x"));
  EXPECT_TRUE(matches(g, "ends in a prefix <tool_cal"));
  EXPECT_TRUE(matches(g, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_TRUE(matches(g,
                      "Let me look.\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n"
                      "</tool_call>"));
  // The marker only ever opens a constrained call.
  EXPECT_FALSE(matches(g, "text <tool_call> more text"));
  EXPECT_FALSE(matches(g, "<<tool_call>\n{\"name\": \"x\"}"));
  EXPECT_FALSE(matches(g, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call> and"));
}

TEST(ToolCallGrammar, Llama3Json) {
  Grammar g = build(spec(ToolCallFormat::kLlama3Json, true, true));
  EXPECT_TRUE(matches(g, "{\"name\": \"get_weather\", \"parameters\": {\"city\":\"Oslo\"}}"));
  EXPECT_TRUE(matches(g,
                      "{\"name\": \"now\", \"parameters\": {}}; {\"name\": \"now\", "
                      "\"parameters\": {}}"));
  EXPECT_FALSE(matches(g, "{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\"}}"));
  Grammar a = build(spec(ToolCallFormat::kLlama3Json, false, false));
  EXPECT_TRUE(matches(a, "The answer is {42}."));
  EXPECT_TRUE(matches(a, ""));
  EXPECT_TRUE(matches(a, "{\"name\": \"now\", \"parameters\": {}}"));
  EXPECT_FALSE(matches(a, "{not a call}"));
}

TEST(ToolCallGrammar, ErrorsNameTheFunction) {
  ToolCallSpec s = spec(ToolCallFormat::kHermes, true, true);
  s.functions[1].index = 3;
  s.functions[1].parameters = R"({"type":"object","properties":{"x":{"not":{}}}})";
  s.functions[1].strict = true;
  auto g = tool_call_grammar(s);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(std::string(g.error().what()).find("tools[3].function.parameters: "), std::string::npos)
      << g.error().what();
  EXPECT_NE(std::string(g.error().what()).find("#/properties/x"), std::string::npos)
      << g.error().what();
  // Not strict: the keyword is skipped and the rest of the schema still holds.
  s.functions[1].strict = false;
  Grammar lenient = build(s);
  EXPECT_TRUE(matches(lenient,
                      "<tool_call>\n{\"name\": \"now\", \"arguments\": {\"x\":1}}\n"
                      "</tool_call>"));
  EXPECT_FALSE(matches(lenient,
                       "<tool_call>\n{\"name\": \"now\", \"arguments\": {\"y\":1}}\n"
                       "</tool_call>"));
}

TEST(ToolCallGrammar, SpecRoundTripsThroughJson) {
  ToolCallSpec s = spec(ToolCallFormat::kLlama3Json, false, false);
  s.functions[0].strict = true;
  auto back = parse_tool_call_spec(tool_call_spec_json(s));
  ASSERT_TRUE(back.ok()) << back.error().what();
  EXPECT_EQ(back->format, ToolCallFormat::kLlama3Json);
  EXPECT_FALSE(back->required);
  EXPECT_FALSE(back->parallel);
  ASSERT_EQ(back->functions.size(), 2u);
  EXPECT_EQ(back->functions[0].name, "get_weather");
  EXPECT_EQ(back->functions[0].parameters, kWeather);
  EXPECT_TRUE(back->functions[0].strict);
  EXPECT_EQ(back->functions[1].parameters, "");
  EXPECT_FALSE(parse_tool_call_spec("{\"format\":\"xml\",\"functions\":[]}").ok());
}

TEST(ToolCallGrammar, DetectsTheFormatFromTheTemplate) {
  EXPECT_EQ(detect_tool_call_format("...<tool_call>\\n{\"name\": <function-name>..."),
            ToolCallFormat::kHermes);
  EXPECT_EQ(detect_tool_call_format("{{- '<|python_tag|>' + tool_call.name }}"),
            ToolCallFormat::kLlama3Json);
  EXPECT_EQ(detect_tool_call_format(
                "Respond in the format {\"name\": function name, \"parameters\": dictionary of "
                "argument name and its value}."),
            ToolCallFormat::kLlama3Json);
  EXPECT_EQ(detect_tool_call_format("{% for m in messages %}{{ m.content }}{% endfor %}"),
            ToolCallFormat::kHermes);
}

TEST(JsonSchemaStrict, NotStrictSkipsWhatCannotBeEnforced) {
  const char* s = R"({"type":"array","items":{"type":"integer"},"uniqueItems":true,"contains":{}})";
  auto strict = json_schema_to_grammar(s);
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(std::string(strict.error().what()).find("'#'"), std::string::npos);
  JsonGrammarOptions o;
  o.strict = false;
  auto lenient = json_schema_to_grammar(s, o);
  ASSERT_TRUE(lenient.ok()) << lenient.error().what();
  EXPECT_TRUE(matches(*lenient, "[1,1,2]"));
  EXPECT_FALSE(matches(*lenient, "[\"a\"]"));
}

// Along real answers in the Llama-3 vocabulary: the precomputed masks equal brute force, the
// answer's tokens are allowed, and end-of-sequence only where the answer may end. Prints the
// slowest mask, which tool_choice auto's free text makes the one to watch.
TEST(ToolCallGrammar, Llama3VocabMasksAlongAnswers) {
  auto vocab = testing::llama3_vocab();
  ASSERT_TRUE(vocab);
  auto trie = TokenTrie::build(*vocab);
  ASSERT_TRUE(trie.ok());
  const std::vector<std::pair<ToolCallSpec, std::string>> cases = {
      {spec(ToolCallFormat::kHermes, false, true),
       "I will look it up <b>now</b>.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
       "{\"city\":\"Oslo\",\"days\":3}}\n</tool_call>"},
      {spec(ToolCallFormat::kHermes, false, true), "No tools needed: 2 < 3."},
      {spec(ToolCallFormat::kLlama3Json, true, true),
       "{\"name\": \"now\", \"parameters\": {}}; {\"name\": \"get_weather\", \"parameters\": "
       "{\"city\":\"Paris\"}}"},
  };
  for (const auto& [s, doc] : cases) {
    SCOPED_TRACE(doc);
    auto g = tool_call_grammar(s);
    ASSERT_TRUE(g.ok()) << g.error().what();
    auto cg = CompiledGrammar::compile(*g, *trie);
    ASSERT_TRUE(cg.ok()) << cg.error().what();
    GrammarMatcher m(*cg);
    std::size_t step = 0;
    double slowest_us = 0;
    for (std::size_t i = 0; i < doc.size(); ++step) {
      auto [id, len] = (*trie)->longest_prefix(std::string_view(doc).substr(i));
      ASSERT_GE(id, 0);
      const auto start = std::chrono::steady_clock::now();
      auto fast = testing::fast_mask(m);
      slowest_us = std::max(slowest_us, std::chrono::duration<double, std::micro>(
                                            std::chrono::steady_clock::now() - start)
                                            .count());
      if (step % 3 == 0) {
        ASSERT_TRUE(testing::same_mask(fast, testing::brute_mask(m, vocab->tokens.size()), *vocab))
            << "step " << step;
      }
      ASSERT_TRUE(fast[id / 32] >> (id % 32) & 1)
          << "token '" << vocab->tokens[id] << "' not allowed at byte " << i;
      ASSERT_TRUE(m.accept_token(id));
      i += len;
    }
    auto fast = testing::fast_mask(m);
    for (auto eos : vocab->eos_ids)
      EXPECT_TRUE(fast[eos / 32] >> (eos % 32) & 1);
    std::cout << "slowest mask " << slowest_us << " us over " << step << " steps\n";
  }
}

}  // namespace
}  // namespace weft::grammar
