#include "runtime/text/jinja_parser.hpp"

#include <initializer_list>
#include <string>

namespace weft::jinja {
namespace {

// Deeper nesting than this is refused rather than risking the stack on hostile input.
constexpr int kMaxDepth = 200;

struct ParseFailure {
  int line;
  int column;
  std::string message;
};

class Parser {
 public:
  Parser(const std::vector<Token>& tokens) : tokens_(tokens) {}

  Body parse_template() {
    std::string end;
    Body body = parse_body({}, end);
    if (peek().kind != TokenKind::kEnd) fail(peek(), "unexpected token");
    return body;
  }

 private:
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

  struct DepthGuard {
    explicit DepthGuard(Parser& p, const Token& at) : parser(p) {
      if (++parser.depth_ > kMaxDepth) fail(at, "the template nests too deeply");
    }
    ~DepthGuard() { --parser.depth_; }
    Parser& parser;
  };

  // Statements until a block tag whose keyword is in `ends`; that keyword goes to `end`.
  Body parse_body(std::initializer_list<std::string_view> ends, std::string& end) {
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.kind == TokenKind::kEnd) {
        if (ends.size() == 0) return body;
        fail(t, "unexpected end of template, expected '" + std::string(*ends.begin()) + "'");
      }
      if (t.kind == TokenKind::kText) {
        auto s = make_stmt(Stmt::Kind::kText, t);
        s->text = next().text;
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::kVarBegin) {
        next();
        auto s = make_stmt(Stmt::Kind::kOutput, t);
        s->expr = parse_tuple();
        if (peek().kind != TokenKind::kVarEnd)
          fail(peek(), "expected '}}', found " + describe(peek()));
        next();
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::kBlockBegin) {
        const Token& keyword = peek(1);
        for (std::string_view e : ends) {
          if (keyword.kind == TokenKind::kName && keyword.text == e) {
            next();
            next();
            end = std::string(e);
            return body;
          }
        }
        next();
        body.push_back(parse_statement());
      } else {
        fail(t, "unexpected " + describe(t));
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
    const Token& at = peek();
    DepthGuard guard(*this, at);
    if (at.kind != TokenKind::kName) fail(at, "expected a statement name, found " + describe(at));
    std::string keyword = next().text;
    std::string end;
    if (keyword == "if") {
      auto s = make_stmt(Stmt::Kind::kIf, at);
      s->expr = parse_tuple();
      expect_block_end();
      s->body = parse_body({"elif", "else", "endif"}, end);
      Stmt* tail = s.get();
      while (end == "elif") {
        const Token& elif_at = peek();
        auto branch = make_stmt(Stmt::Kind::kIf, elif_at);
        branch->expr = parse_tuple();
        expect_block_end();
        branch->body = parse_body({"elif", "else", "endif"}, end);
        Stmt* raw = branch.get();
        tail->else_body.push_back(std::move(branch));
        tail = raw;
      }
      if (end == "else") {
        expect_block_end();
        tail->else_body = parse_body({"endif"}, end);
      }
      expect_block_end();
      return s;
    }
    if (keyword == "for") {
      auto s = make_stmt(Stmt::Kind::kFor, at);
      bool paren = is_op("(");
      if (paren) next();
      s->targets.push_back(expect_name());
      while (is_op(",")) {
        next();
        s->targets.push_back(expect_name());
      }
      if (paren) expect_op(")");
      if (!is_name("in")) fail(peek(), "expected 'in', found " + describe(peek()));
      next();
      s->expr = parse_tuple(/*with_condition=*/false);
      if (is_name("if")) {
        next();
        s->filter = parse_expression();
      }
      if (is_name("recursive")) fail(peek(), "recursive for loops are not supported");
      expect_block_end();
      s->body = parse_body({"else", "endfor"}, end);
      if (end == "else") {
        expect_block_end();
        s->else_body = parse_body({"endfor"}, end);
      }
      expect_block_end();
      return s;
    }
    if (keyword == "set") {
      auto s = make_stmt(Stmt::Kind::kSet, at);
      s->targets.push_back(expect_name());
      if (is_op(".")) {
        next();
        s->targets.push_back(expect_name());
        s->set_attribute = true;
      } else {
        while (is_op(",")) {
          next();
          s->targets.push_back(expect_name());
        }
      }
      if (peek().kind == TokenKind::kBlockEnd && s->targets.size() == 1) {
        next();
        s->kind = Stmt::Kind::kSetBlock;
        s->body = parse_body({"endset"}, end);
        expect_block_end();
        return s;
      }
      expect_op("=");
      s->expr = parse_tuple();
      expect_block_end();
      return s;
    }
    if (keyword == "macro") {
      auto s = make_stmt(Stmt::Kind::kMacro, at);
      s->text = expect_name();
      expect_op("(");
      while (!is_op(")")) {
        if (!s->params.empty()) expect_op(",");
        s->params.push_back(expect_name());
        if (is_op("=")) {
          next();
          s->defaults.push_back(parse_expression());
        } else {
          s->defaults.push_back(nullptr);
        }
      }
      next();
      expect_block_end();
      s->body = parse_body({"endmacro"}, end);
      if (peek().kind == TokenKind::kName) next();  // {% endmacro name %}
      expect_block_end();
      return s;
    }
    if (keyword == "break" || keyword == "continue") {
      auto s = make_stmt(keyword == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, at);
      expect_block_end();
      return s;
    }
    if (keyword == "generation") {
      auto s = make_stmt(Stmt::Kind::kGeneration, at);
      expect_block_end();
      s->body = parse_body({"endgeneration"}, end);
      expect_block_end();
      return s;
    }
    fail(at, "unsupported statement '" + keyword + "'");
  }

  ExprPtr make_expr(Expr::Kind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }

  ExprPtr parse_tuple(bool with_condition = true) {
    const Token& at = peek();
    ExprPtr first = with_condition ? parse_expression() : parse_or();
    if (!is_op(",")) return first;
    auto tuple = make_expr(Expr::Kind::kTuple, at);
    tuple->args.push_back(std::move(first));
    while (is_op(",")) {
      next();
      if (peek().kind == TokenKind::kVarEnd || peek().kind == TokenKind::kBlockEnd) break;
      tuple->args.push_back(with_condition ? parse_expression() : parse_or());
    }
    return tuple;
  }

  ExprPtr parse_expression() {
    const Token& at = peek();
    DepthGuard guard(*this, at);
    ExprPtr e = parse_or();
    while (is_name("if")) {
      next();
      auto cond = make_expr(Expr::Kind::kCondition, at);
      cond->args.push_back(parse_or());
      cond->args.push_back(std::move(e));
      if (is_name("else")) {
        next();
        cond->args.push_back(parse_expression());
      } else {
        cond->args.push_back(nullptr);
      }
      e = std::move(cond);
    }
    return e;
  }

  ExprPtr binary(const Token& at, std::string op, ExprPtr l, ExprPtr r) {
    auto e = make_expr(Expr::Kind::kBinary, at);
    e->name = std::move(op);
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const Token& at = next();
      e = binary(at, "or", std::move(e), parse_and());
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const Token& at = next();
      e = binary(at, "and", std::move(e), parse_not());
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      const Token& at = next();
      DepthGuard guard(*this, at);
      auto e = make_expr(Expr::Kind::kUnary, at);
      e->name = "not";
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& at = peek();
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (peek().kind == TokenKind::kOperator &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == ">" ||
           peek().text == "<=" || peek().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make_expr(Expr::Kind::kCompare, at);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  template <class Next>
  ExprPtr parse_binary_level(std::initializer_list<std::string_view> ops, Next next_level) {
    ExprPtr e = (this->*next_level)();
    while (true) {
      bool matched = false;
      for (std::string_view op : ops) {
        if (is_op(op)) {
          const Token& at = next();
          e = binary(at, std::string(op), std::move(e), (this->*next_level)());
          matched = true;
          break;
        }
      }
      if (!matched) return e;
    }
  }

  ExprPtr parse_math1() { return parse_binary_level({"+", "-"}, &Parser::parse_concat); }
  ExprPtr parse_concat() { return parse_binary_level({"~"}, &Parser::parse_math2); }
  ExprPtr parse_math2() { return parse_binary_level({"*", "/", "//", "%"}, &Parser::parse_pow); }
  ExprPtr parse_pow() { return parse_binary_level({"**"}, &Parser::parse_unary_filtered); }
  ExprPtr parse_unary_filtered() { return parse_unary(true); }

  ExprPtr parse_unary(bool with_filter) {
    const Token& at = peek();
    DepthGuard guard(*this, at);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = make_expr(Expr::Kind::kUnary, at);
      e->name = next().text;
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    if (t.kind == TokenKind::kName) {
      next();
      if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
        auto e = make_expr(Expr::Kind::kConst, t);
        e->constant = Value(t.text == "true" || t.text == "True");
        return e;
      }
      if (t.text == "none" || t.text == "None") {
        auto e = make_expr(Expr::Kind::kConst, t);
        e->constant = Value::none();
        return e;
      }
      auto e = make_expr(Expr::Kind::kName, t);
      e->name = t.text;
      return e;
    }
    if (t.kind == TokenKind::kString) {
      std::string s;
      while (peek().kind == TokenKind::kString)
        s += next().text;
      auto e = make_expr(Expr::Kind::kConst, t);
      e->constant = Value(std::move(s));
      return e;
    }
    if (t.kind == TokenKind::kInteger || t.kind == TokenKind::kFloat) {
      next();
      auto e = make_expr(Expr::Kind::kConst, t);
      e->constant = t.number;
      return e;
    }
    if (is_op("(")) {
      next();
      if (is_op(")")) {
        next();
        return make_expr(Expr::Kind::kTuple, t);
      }
      ExprPtr e = parse_expression();
      if (is_op(",")) {
        auto tuple = make_expr(Expr::Kind::kTuple, t);
        tuple->args.push_back(std::move(e));
        while (is_op(",")) {
          next();
          if (is_op(")")) break;
          tuple->args.push_back(parse_expression());
        }
        e = std::move(tuple);
      }
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      auto e = make_expr(Expr::Kind::kList, t);
      while (!is_op("]")) {
        if (!e->args.empty()) {
          expect_op(",");
          if (is_op("]")) break;
        }
        e->args.push_back(parse_expression());
      }
      next();
      return e;
    }
    if (is_op("{")) {
      next();
      auto e = make_expr(Expr::Kind::kDict, t);
      while (!is_op("}")) {
        if (!e->args.empty()) {
          expect_op(",");
          if (is_op("}")) break;
        }
        e->args.push_back(parse_expression());
        expect_op(":");
        e->args.push_back(parse_expression());
      }
      next();
      return e;
    }
    fail(t, "expected an expression, found " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const Token& at = peek();
      if (is_op(".")) {
        next();
        if (peek().kind == TokenKind::kInteger) {
          auto item = make_expr(Expr::Kind::kItem, at);
          auto index = make_expr(Expr::Kind::kConst, peek());
          index->constant = next().number;
          item->args.push_back(std::move(e));
          item->args.push_back(std::move(index));
          e = std::move(item);
        } else {
          auto attr = make_expr(Expr::Kind::kAttr, at);
          attr->name = expect_name();
          attr->args.push_back(std::move(e));
          e = std::move(attr);
        }
      } else if (is_op("[")) {
        next();
        e = parse_subscript(std::move(e), at);
      } else if (is_op("(")) {
        e = parse_call(std::move(e), at);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target, const Token& at) {
    ExprPtr start, stop, step;
    if (!is_op(":")) {
      start = parse_expression();
      if (is_op("]")) {
        next();
        auto item = make_expr(Expr::Kind::kItem, at);
        item->args.push_back(std::move(target));
        item->args.push_back(std::move(start));
        return item;
      }
    }
    expect_op(":");
    if (!is_op("]") && !is_op(":")) stop = parse_expression();
    if (is_op(":")) {
      next();
      if (!is_op("]")) step = parse_expression();
    }
    expect_op("]");
    auto slice = make_expr(Expr::Kind::kSlice, at);
    slice->args.push_back(std::move(target));
    slice->args.push_back(std::move(start));
    slice->args.push_back(std::move(stop));
    slice->args.push_back(std::move(step));
    return slice;
  }

  // Arguments "(a, b, key=c)" into e->args (after what is already there) and e->kwargs.
  void parse_arguments(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      first = false;
      if (is_op("*") || is_op("**")) fail(peek(), "*args and **kwargs are not supported");
      if (peek().kind == TokenKind::kName && is_op("=", 1)) {
        std::string key = next().text;
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        if (!e.kwargs.empty()) fail(peek(), "a positional argument follows a keyword argument");
        e.args.push_back(parse_expression());
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr callee, const Token& at) {
    auto call = make_expr(Expr::Kind::kCall, at);
    // Errors in a call point at what is called, not at its parenthesis.
    call->line = callee->line;
    call->column = callee->column;
    call->args.push_back(std::move(callee));
    parse_arguments(*call);
    return call;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      const Token& at = peek();
      if (is_op("|")) {
        next();
        const Token& name_token = peek();
        auto filter = make_expr(Expr::Kind::kFilter, at);
        filter->name = expect_name();
        if (!is_known_filter(filter->name))
          fail(name_token, "no filter named '" + filter->name + "'");
        filter->args.push_back(std::move(e));
        if (is_op("(")) parse_arguments(*filter);
        e = std::move(filter);
      } else if (is_name("is")) {
        next();
        auto test = make_expr(Expr::Kind::kTest, at);
        if (is_name("not")) {
          next();
          test->negated = true;
        }
        const Token& name_token = peek();
        test->name = expect_name();
        if (!is_known_test(test->name)) fail(name_token, "no test named '" + test->name + "'");
        test->args.push_back(std::move(e));
        const Token& n = peek();
        if (is_op("(")) {
          parse_arguments(*test);
        } else if ((n.kind == TokenKind::kName || n.kind == TokenKind::kString ||
                    n.kind == TokenKind::kInteger || n.kind == TokenKind::kFloat || is_op("[") ||
                    is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) fail(n, "tests cannot be chained with 'is'");
          test->args.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(test);
      } else if (is_op("(")) {
        e = parse_call(std::move(e), at);
      } else {
        return e;
      }
    }
  }

  const std::vector<Token>& tokens_;
  std::size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<Body> parse(const std::vector<Token>& tokens, std::string_view source_name) {
  if (tokens.empty() || tokens.back().kind != TokenKind::kEnd) {
    return Error(ErrorCode::kInternal, std::string(source_name) + ": token list without an end");
  }
  try {
    return Parser(tokens).parse_template();
  } catch (const ParseFailure& f) {
    return Error(ErrorCode::kParse, std::string(source_name) + ":" + std::to_string(f.line) + ":" +
                                        std::to_string(f.column) + ": " + f.message);
  }
}

}  // namespace weft::jinja
