#include "actors/gateway_tool_calls.hpp"

#include <gtest/gtest.h>

namespace weft::gateway {
namespace {

using grammar::ToolCallFormat;

std::function<std::string()> ids() {
  return [n = 0]() mutable { return "call_" + std::to_string(n++); };
}

ParsedToolCalls whole(ToolCallFormat format, std::string_view text) {
  ToolCallParser parser(format, ids());
  ParsedToolCalls out;
  collect(parser.feed(text), out);
  collect(parser.finish(), out);
  return out;
}

// Fed in pieces of `step` bytes: the pieces must add up to what the whole text gives.
ParsedToolCalls pieces(ToolCallFormat format, std::string_view text, std::size_t step) {
  ToolCallParser parser(format, ids());
  ParsedToolCalls out;
  for (std::size_t i = 0; i < text.size(); i += step)
    collect(parser.feed(text.substr(i, step)), out);
  collect(parser.finish(), out);
  return out;
}

void expect_same(const ParsedToolCalls& a, const ParsedToolCalls& b) {
  EXPECT_EQ(a.content, b.content);
  ASSERT_EQ(a.calls.size(), b.calls.size());
  for (std::size_t i = 0; i < a.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].id, b.calls[i].id);
    EXPECT_EQ(a.calls[i].name, b.calls[i].name);
    EXPECT_EQ(a.calls[i].arguments, b.calls[i].arguments);
  }
}

TEST(ToolCallParser, HermesCallsAfterText) {
  const std::string text =
      "Let me check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\":\"Oslo \\\"}x\",\"days\":[1,{\"a\":2}]}}\n</tool_call>\n<tool_call>\n"
      "{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
  ParsedToolCalls p = whole(ToolCallFormat::kHermes, text);
  EXPECT_EQ(p.content, "Let me check.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].id, "call_0");
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, "{\"city\":\"Oslo \\\"}x\",\"days\":[1,{\"a\":2}]}");
  EXPECT_EQ(p.calls[1].name, "now");
  EXPECT_EQ(p.calls[1].arguments, "{}");
  for (std::size_t step : {1, 2, 3, 7, 64})
    expect_same(pieces(ToolCallFormat::kHermes, text, step), p);
}

TEST(ToolCallParser, HermesPlainTextStaysText) {
  const std::string text = "No call here <b>, not even <tool_cal";
  ParsedToolCalls p = whole(ToolCallFormat::kHermes, text);
  EXPECT_EQ(p.content, text);
  EXPECT_TRUE(p.calls.empty());
  for (std::size_t step : {1, 4})
    expect_same(pieces(ToolCallFormat::kHermes, text, step), p);
  // Trailing whitespace of a text without calls is kept.
  EXPECT_EQ(whole(ToolCallFormat::kHermes, "a \n").content, "a \n");
}

TEST(ToolCallParser, HermesMalformedCallIsText) {
  const std::string text = "<tool_call>\nnot json</tool_call>";
  ParsedToolCalls p = whole(ToolCallFormat::kHermes, text);
  EXPECT_EQ(p.content, text);
  EXPECT_TRUE(p.calls.empty());
  expect_same(pieces(ToolCallFormat::kHermes, text, 1), p);
}

TEST(ToolCallParser, TruncatedCallKeepsWhatArrived) {
  // max_tokens cut the output inside the arguments.
  ParsedToolCalls p =
      whole(ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": [1, 2");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, "{\"x\": [1, 2");
  EXPECT_EQ(p.content, "");
  // Cut before the name: nothing to call.
  p = whole(ToolCallFormat::kHermes, "<tool_call>\n{\"na");
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, "<tool_call>\n{\"na");
}

TEST(ToolCallParser, Llama3Json) {
  const std::string text =
      " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}; {\"name\": \"now\", "
      "\"parameters\": {}}";
  ParsedToolCalls p = whole(ToolCallFormat::kLlama3Json, text);
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].arguments, "{\"city\": \"Oslo\"}");
  EXPECT_EQ(p.calls[1].name, "now");
  for (std::size_t step : {1, 5})
    expect_same(pieces(ToolCallFormat::kLlama3Json, text, step), p);
  p = whole(ToolCallFormat::kLlama3Json, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "f");
  // Text that does not start with '{' is content, braces later on included.
  p = whole(ToolCallFormat::kLlama3Json, "The set {1, 2}.");
  EXPECT_EQ(p.content, "The set {1, 2}.");
  EXPECT_TRUE(p.calls.empty());
  p = whole(ToolCallFormat::kLlama3Json, "{1, 2}");
  EXPECT_EQ(p.content, "{1, 2}");
  EXPECT_TRUE(p.calls.empty());
}

TEST(ToolCallParser, StreamsNameFirstThenArgumentFragments) {
  ToolCallParser parser(ToolCallFormat::kHermes, ids());
  auto a = parser.feed("<tool_call>\n{\"name\": \"f\", ");
  EXPECT_TRUE(a.empty());
  auto b = parser.feed("\"arguments\": {\"x\"");
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].kind, ToolCallPiece::Kind::kCallStart);
  EXPECT_EQ(b[0].name, "f");
  EXPECT_EQ(b[1].kind, ToolCallPiece::Kind::kArguments);
  EXPECT_EQ(b[1].text, "{\"x\"");
  auto c = parser.feed(":1}}\n</tool_call>");
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].text, ":1}");
  EXPECT_TRUE(parser.finish().empty());
  EXPECT_EQ(parser.calls(), 1);
}

}  // namespace
}  // namespace weft::gateway
