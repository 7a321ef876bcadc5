// The lexer alone: token kinds, positions and the whitespace rules of transformers' Jinja
// environment (trim_blocks, lstrip_blocks, '-' and '+' markers).

#include "runtime/text/jinja_lexer.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace weft::jinja {
namespace {

std::vector<Token> lex(std::string_view source) {
  auto tokens = tokenize(source, "t.jinja");
  EXPECT_TRUE(tokens.ok()) << (tokens.ok() ? "" : tokens.error().what());
  return tokens.ok() ? tokens.value() : std::vector<Token>{};
}

// The text tokens only, joined with '|'.
std::string texts(std::string_view source) {
  std::string out;
  for (const Token& t : lex(source)) {
    if (t.kind == TokenKind::kText) out += (out.empty() ? "" : "|") + t.text;
  }
  return out;
}

TEST(JinjaLexerTest, TokensCarryKindsAndPositions) {
  auto tokens = lex("ab\n{{ x.y[0] | f('s', 1.5) }}");
  ASSERT_EQ(tokens.size(), 17u);
  EXPECT_EQ(tokens[0].kind, TokenKind::kText);
  EXPECT_EQ(tokens[1].kind, TokenKind::kVarBegin);
  EXPECT_EQ(tokens[1].line, 2);
  EXPECT_EQ(tokens[1].column, 1);
  EXPECT_EQ(tokens[2].kind, TokenKind::kName);
  EXPECT_EQ(tokens[2].text, "x");
  EXPECT_EQ(tokens[2].column, 4);
  EXPECT_EQ(tokens[6].kind, TokenKind::kInteger);
  EXPECT_EQ(tokens[6].number.as_int(), 0);
  EXPECT_EQ(tokens[11].kind, TokenKind::kString);
  EXPECT_EQ(tokens[11].text, "s");
  EXPECT_EQ(tokens[13].kind, TokenKind::kFloat);
  EXPECT_EQ(tokens[13].number.as_float(), 1.5);
  EXPECT_EQ(tokens[15].kind, TokenKind::kVarEnd);
  EXPECT_EQ(tokens[16].kind, TokenKind::kEnd);
}

TEST(JinjaLexerTest, TrimAndLstripBlocks) {
  // The newline after a block tag goes; spaces before a block tag on its own line go.
  EXPECT_EQ(texts("a\n  {% if x %}\n  b\n  {% endif %}\nc"), "a\n|  b\n|c");
  // Expression tags keep both.
  EXPECT_EQ(texts("a\n  {{ x }}\nb"), "a\n  |\nb");
  // '+' keeps the indentation before a block tag, and after '+%}' the newline stays.
  EXPECT_EQ(texts("a\n  {%+ if x +%}\nb"), "a\n  |\nb");
  // '-' strips all whitespace on its side, newlines included.
  EXPECT_EQ(texts("a \n\t{%- if x -%}\n\n b"), "a|b");
  // lstrip applies only when the tag starts its line.
  EXPECT_EQ(texts("a  {% if x %}"), "a  ");
}

TEST(JinjaLexerTest, NewlinesAreNormalisedAndOneTrailingNewlineDropped) {
  EXPECT_EQ(texts("a\r\nb\rc\n"), "a\nb\nc");
  EXPECT_EQ(texts("a\n\n"), "a\n");
}

TEST(JinjaLexerTest, BracesInsideExpressionsDoNotEndTheTag) {
  auto tokens = lex("{{ {'a': {'b': 1}} }}");
  EXPECT_EQ(tokens[tokens.size() - 2].kind, TokenKind::kVarEnd);
}

TEST(JinjaLexerTest, ErrorsAreLocated) {
  auto unclosed = tokenize("x\n{# never closed", "t.jinja");
  ASSERT_FALSE(unclosed.ok());
  EXPECT_STREQ(unclosed.error().what(), "t.jinja:2:1: the comment is never closed with '#}'");
  auto bad_char = tokenize("{{ a ? b }}", "t.jinja");
  ASSERT_FALSE(bad_char.ok());
  EXPECT_STREQ(bad_char.error().what(), "t.jinja:1:6: unexpected character '?'");
  auto bad_escape = tokenize("{{ '\\u12' }}", "t.jinja");
  ASSERT_FALSE(bad_escape.ok());
  EXPECT_STREQ(bad_escape.error().what(), "t.jinja:1:5: truncated \\u escape");
}

// Columns count code points from the line's start, across many tokens on one long line with
// multi-byte and malformed UTF-8 between them (each token's column is counted on from the
// previous token's: a line of n tokens was counted n times over).
TEST(JinjaLexerTest, ColumnsOnALongLine) {
  std::string source;
  std::size_t points = 0;
  for (int i = 0; i < 2000; ++i) {
    source += "\xC3\xA9{{ x }}\xE2\x82";  // é, a tag, a truncated 3-byte sequence (2 points)
    points += 1 + 7 + 2;
  }
  source += "{{ a ? b }}";
  auto bad = tokenize(source, "t.jinja");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(std::string(bad.error().what()),
            "t.jinja:1:" + std::to_string(points + 6) + ": unexpected character '?'");
  auto tokens = lex("\xC3\xA9{{ x }}\xE2\x82{{ y }}");
  ASSERT_EQ(tokens.size(), 9u);
  EXPECT_EQ(tokens[6].text, "y");
  EXPECT_EQ(tokens[6].column, 14);
}

}  // namespace
}  // namespace weft::jinja
