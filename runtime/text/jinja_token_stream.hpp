#pragma once
// The token cursor the statement parser (jinja_parser.cpp) and the expression parser
// (jinja_expression_parser.cpp) share. Failures throw ParseFailure, which parse() turns into
// a weft::Error with the line and column.

#include <string>
#include <string_view>
#include <vector>

#include "runtime/text/jinja_lexer.hpp"

namespace weft::jinja {

// Deeper nesting than this is refused rather than risking the stack on hostile input.
constexpr int kMaxDepth = 200;

struct ParseFailure {
  int line;
  int column;
  std::string message;
};

class TokenStream {
 public:
  explicit TokenStream(const std::vector<Token>& tokens) : tokens_(tokens) {}

  const Token& peek(std::size_t ahead = 0) const {
    std::size_t i = pos_ + ahead;
    return i < tokens_.size() ? tokens_[i] : tokens_.back();
  }
  const Token& next() {
    const Token& t = peek();
    if (pos_ < tokens_.size() - 1) ++pos_;
    return t;
  }
  bool is_op(std::string_view op, std::size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kOperator && peek(ahead).text == op;
  }
  bool is_name(std::string_view name, std::size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kName && peek(ahead).text == name;
  }
  [[noreturn]] static void fail(const Token& at, std::string message) {
    throw ParseFailure{at.line, at.column, std::move(message)};
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kEnd:
        return "the end of the template";
      case TokenKind::kText:
        return "template text";
      case TokenKind::kVarEnd:
        return "'}}'";
      case TokenKind::kBlockEnd:
        return "'%}'";
      case TokenKind::kVarBegin:
        return "'{{'";
      case TokenKind::kBlockBegin:
        return "'{%'";
      case TokenKind::kString:
        return "a string";
      default:
        return "'" + t.text + "'";
    }
  }
  void expect_op(std::string_view op) {
    if (!is_op(op)) fail(peek(), "expected '" + std::string(op) + "', found " + describe(peek()));
    next();
  }
  std::string expect_name() {
    if (peek().kind != TokenKind::kName) fail(peek(), "expected a name, found " + describe(peek()));
    return next().text;
  }
  void expect_block_end() {
    if (peek().kind != TokenKind::kBlockEnd) {
      fail(peek(), "expected '%}', found " + describe(peek()));
    }
    next();
  }

  // Counts nesting while alive; past kMaxDepth the parse fails.
  struct DepthGuard {
    DepthGuard(TokenStream& s, const Token& at) : stream(s) {
      if (++stream.depth_ > kMaxDepth) fail(at, "the template nests too deeply");
    }
    ~DepthGuard() { --stream.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
    TokenStream& stream;
  };

 private:
  const std::vector<Token>& tokens_;
  std::size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace weft::jinja
