// The statement half of the parser: template text, {{ }} and {% %} blocks into a Body.

#include "runtime/text/jinja_parser.hpp"

#include <initializer_list>
#include <string>

#include "runtime/text/jinja_expression_parser.hpp"
#include "runtime/text/jinja_token_stream.hpp"

namespace weft::jinja {
namespace {

class StatementParser {
 public:
  explicit StatementParser(TokenStream& s) : s_(s) {}

  Body parse_template() {
    std::string end;
    Body body = parse_body({}, end);
    if (s_.peek().kind != TokenKind::kEnd) TokenStream::fail(s_.peek(), "unexpected token");
    return body;
  }

 private:
  // Statements until a block tag whose keyword is in `ends`; that keyword goes to `end`.
  Body parse_body(std::initializer_list<std::string_view> ends, std::string& end) {
    Body body;
    while (true) {
      const Token& t = s_.peek();
      if (t.kind == TokenKind::kEnd) {
        if (ends.size() == 0) return body;
        TokenStream::fail(
            t, "unexpected end of template, expected '" + std::string(*ends.begin()) + "'");
      }
      if (t.kind == TokenKind::kText) {
        auto s = make_stmt(Stmt::Kind::kText, t);
        s->text = s_.next().text;
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::kVarBegin) {
        s_.next();
        auto s = make_stmt(Stmt::Kind::kOutput, t);
        s->expr = parse_tuple(s_);
        if (s_.peek().kind != TokenKind::kVarEnd)
          TokenStream::fail(s_.peek(), "expected '}}', found " + TokenStream::describe(s_.peek()));
        s_.next();
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::kBlockBegin) {
        const Token& keyword = s_.peek(1);
        for (std::string_view e : ends) {
          if (keyword.kind == TokenKind::kName && keyword.text == e) {
            s_.next();
            s_.next();
            end = std::string(e);
            return body;
          }
        }
        s_.next();
        body.push_back(parse_statement());
      } else {
        TokenStream::fail(t, "unexpected " + TokenStream::describe(t));
      }
    }
  }

  StmtPtr make_stmt(Stmt::Kind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->column = at.column;
    return s;
  }

  StmtPtr parse_statement() {
    const Token& at = s_.peek();
    TokenStream::DepthGuard guard(s_, at);
    if (at.kind != TokenKind::kName)
      TokenStream::fail(at, "expected a statement name, found " + TokenStream::describe(at));
    std::string keyword = s_.next().text;
    std::string end;
    if (keyword == "if") {
      auto s = make_stmt(Stmt::Kind::kIf, at);
      s->expr = parse_tuple(s_);
      s_.expect_block_end();
      s->body = parse_body({"elif", "else", "endif"}, end);
      Stmt* tail = s.get();
      while (end == "elif") {
        const Token& elif_at = s_.peek();
        auto branch = make_stmt(Stmt::Kind::kIf, elif_at);
        branch->expr = parse_tuple(s_);
        s_.expect_block_end();
        branch->body = parse_body({"elif", "else", "endif"}, end);
        Stmt* raw = branch.get();
        tail->else_body.push_back(std::move(branch));
        tail = raw;
      }
      if (end == "else") {
        s_.expect_block_end();
        tail->else_body = parse_body({"endif"}, end);
      }
      s_.expect_block_end();
      return s;
    }
    if (keyword == "for") {
      auto s = make_stmt(Stmt::Kind::kFor, at);
      bool paren = s_.is_op("(");
      if (paren) s_.next();
      s->targets.push_back(s_.expect_name());
      while (s_.is_op(",")) {
        s_.next();
        s->targets.push_back(s_.expect_name());
      }
      if (paren) s_.expect_op(")");
      if (!s_.is_name("in"))
        TokenStream::fail(s_.peek(), "expected 'in', found " + TokenStream::describe(s_.peek()));
      s_.next();
      s->expr = parse_tuple(s_, /*with_condition=*/false);
      if (s_.is_name("if")) {
        s_.next();
        s->filter = parse_expression(s_);
      }
      if (s_.is_name("recursive"))
        TokenStream::fail(s_.peek(), "recursive for loops are not supported");
      s_.expect_block_end();
      s->body = parse_body({"else", "endfor"}, end);
      if (end == "else") {
        s_.expect_block_end();
        s->else_body = parse_body({"endfor"}, end);
      }
      s_.expect_block_end();
      return s;
    }
    if (keyword == "set") {
      auto s = make_stmt(Stmt::Kind::kSet, at);
      s->targets.push_back(s_.expect_name());
      if (s_.is_op(".")) {
        s_.next();
        s->targets.push_back(s_.expect_name());
        s->set_attribute = true;
      } else {
        while (s_.is_op(",")) {
          s_.next();
          s->targets.push_back(s_.expect_name());
        }
      }
      if (s_.peek().kind == TokenKind::kBlockEnd && s->targets.size() == 1) {
        s_.next();
        s->kind = Stmt::Kind::kSetBlock;
        s->body = parse_body({"endset"}, end);
        s_.expect_block_end();
        return s;
      }
      s_.expect_op("=");
      s->expr = parse_tuple(s_);
      s_.expect_block_end();
      return s;
    }
    if (keyword == "macro") {
      auto s = make_stmt(Stmt::Kind::kMacro, at);
      s->text = s_.expect_name();
      s_.expect_op("(");
      while (!s_.is_op(")")) {
        if (!s->params.empty()) s_.expect_op(",");
        s->params.push_back(s_.expect_name());
        if (s_.is_op("=")) {
          s_.next();
          s->defaults.push_back(parse_expression(s_));
        } else {
          s->defaults.push_back(nullptr);
        }
      }
      s_.next();
      s_.expect_block_end();
      s->body = parse_body({"endmacro"}, end);
      if (s_.peek().kind == TokenKind::kName) s_.next();  // {% endmacro name %}
      s_.expect_block_end();
      return s;
    }
    if (keyword == "break" || keyword == "continue") {
      auto s = make_stmt(keyword == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, at);
      s_.expect_block_end();
      return s;
    }
    if (keyword == "generation") {
      auto s = make_stmt(Stmt::Kind::kGeneration, at);
      s_.expect_block_end();
      s->body = parse_body({"endgeneration"}, end);
      s_.expect_block_end();
      return s;
    }
    TokenStream::fail(at, "unsupported statement '" + keyword + "'");
  }

  TokenStream& s_;
};

}  // namespace

Result<Body> parse(const std::vector<Token>& tokens, std::string_view source_name) {
  if (tokens.empty() || tokens.back().kind != TokenKind::kEnd) {
    return Error(ErrorCode::kInternal, std::string(source_name) + ": token list without an end");
  }
  try {
    TokenStream stream(tokens);
    return StatementParser(stream).parse_template();
  } catch (const ParseFailure& f) {
    return Error(ErrorCode::kParse, std::string(source_name) + ":" + std::to_string(f.line) + ":" +
                                        std::to_string(f.column) + ": " + f.message);
  }
}

}  // namespace weft::jinja
