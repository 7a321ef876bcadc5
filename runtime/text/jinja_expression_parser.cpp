// The expression half of the parser: Jinja's precedence from conditional expressions down to
// primaries, postfix access, calls, filters and tests.

#include "runtime/text/jinja_expression_parser.hpp"

#include <initializer_list>
#include <string>

#include "runtime/text/jinja_parser.hpp"

namespace weft::jinja {
namespace {

class ExpressionParser {
 public:
  explicit ExpressionParser(TokenStream& s) : s_(s) {}

  // parse_tuple and parse_expression are the entry points; the rest is one method per
  // precedence level, lowest first.
  ExprPtr make_expr(Expr::Kind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }

  ExprPtr parse_tuple(bool with_condition = true) {
    const Token& at = s_.peek();
    ExprPtr first = with_condition ? parse_expression() : parse_or();
    if (!s_.is_op(",")) return first;
    auto tuple = make_expr(Expr::Kind::kTuple, at);
    tuple->args.push_back(std::move(first));
    while (s_.is_op(",")) {
      s_.next();
      if (s_.peek().kind == TokenKind::kVarEnd || s_.peek().kind == TokenKind::kBlockEnd) break;
      tuple->args.push_back(with_condition ? parse_expression() : parse_or());
    }
    return tuple;
  }

  ExprPtr parse_expression() {
    const Token& at = s_.peek();
    TokenStream::DepthGuard guard(s_, at);
    ExprPtr e = parse_or();
    while (s_.is_name("if")) {
      s_.next();
      auto cond = make_expr(Expr::Kind::kCondition, at);
      cond->args.push_back(parse_or());
      cond->args.push_back(std::move(e));
      if (s_.is_name("else")) {
        s_.next();
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
    while (s_.is_name("or")) {
      const Token& at = s_.next();
      e = binary(at, "or", std::move(e), parse_and());
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (s_.is_name("and")) {
      const Token& at = s_.next();
      e = binary(at, "and", std::move(e), parse_not());
    }
    return e;
  }

  ExprPtr parse_not() {
    if (s_.is_name("not")) {
      const Token& at = s_.next();
      TokenStream::DepthGuard guard(s_, at);
      auto e = make_expr(Expr::Kind::kUnary, at);
      e->name = "not";
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& at = s_.peek();
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (s_.peek().kind == TokenKind::kOperator &&
          (s_.peek().text == "==" || s_.peek().text == "!=" || s_.peek().text == "<" ||
           s_.peek().text == ">" || s_.peek().text == "<=" || s_.peek().text == ">=")) {
        op = s_.next().text;
      } else if (s_.is_name("in")) {
        s_.next();
        op = "in";
      } else if (s_.is_name("not") && s_.is_name("in", 1)) {
        s_.next();
        s_.next();
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
        if (s_.is_op(op)) {
          const Token& at = s_.next();
          e = binary(at, std::string(op), std::move(e), (this->*next_level)());
          matched = true;
          break;
        }
      }
      if (!matched) return e;
    }
  }

  ExprPtr parse_math1() { return parse_binary_level({"+", "-"}, &ExpressionParser::parse_concat); }
  ExprPtr parse_concat() { return parse_binary_level({"~"}, &ExpressionParser::parse_math2); }
  ExprPtr parse_math2() {
    return parse_binary_level({"*", "/", "//", "%"}, &ExpressionParser::parse_pow);
  }
  ExprPtr parse_pow() {
    return parse_binary_level({"**"}, &ExpressionParser::parse_unary_filtered);
  }
  ExprPtr parse_unary_filtered() { return parse_unary(true); }

  ExprPtr parse_unary(bool with_filter) {
    const Token& at = s_.peek();
    TokenStream::DepthGuard guard(s_, at);
    ExprPtr e;
    if (s_.is_op("-") || s_.is_op("+")) {
      e = make_expr(Expr::Kind::kUnary, at);
      e->name = s_.next().text;
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = s_.peek();
    if (t.kind == TokenKind::kName) {
      s_.next();
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
      while (s_.peek().kind == TokenKind::kString)
        s += s_.next().text;
      auto e = make_expr(Expr::Kind::kConst, t);
      e->constant = Value(std::move(s));
      return e;
    }
    if (t.kind == TokenKind::kInteger || t.kind == TokenKind::kFloat) {
      s_.next();
      auto e = make_expr(Expr::Kind::kConst, t);
      e->constant = t.number;
      return e;
    }
    if (s_.is_op("(")) {
      s_.next();
      if (s_.is_op(")")) {
        s_.next();
        return make_expr(Expr::Kind::kTuple, t);
      }
      ExprPtr e = parse_expression();
      if (s_.is_op(",")) {
        auto tuple = make_expr(Expr::Kind::kTuple, t);
        tuple->args.push_back(std::move(e));
        while (s_.is_op(",")) {
          s_.next();
          if (s_.is_op(")")) break;
          tuple->args.push_back(parse_expression());
        }
        e = std::move(tuple);
      }
      s_.expect_op(")");
      return e;
    }
    if (s_.is_op("[")) {
      s_.next();
      auto e = make_expr(Expr::Kind::kList, t);
      while (!s_.is_op("]")) {
        if (!e->args.empty()) {
          s_.expect_op(",");
          if (s_.is_op("]")) break;
        }
        e->args.push_back(parse_expression());
      }
      s_.next();
      return e;
    }
    if (s_.is_op("{")) {
      s_.next();
      auto e = make_expr(Expr::Kind::kDict, t);
      while (!s_.is_op("}")) {
        if (!e->args.empty()) {
          s_.expect_op(",");
          if (s_.is_op("}")) break;
        }
        e->args.push_back(parse_expression());
        s_.expect_op(":");
        e->args.push_back(parse_expression());
      }
      s_.next();
      return e;
    }
    TokenStream::fail(t, "expected an expression, found " + TokenStream::describe(t));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const Token& at = s_.peek();
      if (s_.is_op(".")) {
        s_.next();
        if (s_.peek().kind == TokenKind::kInteger) {
          auto item = make_expr(Expr::Kind::kItem, at);
          auto index = make_expr(Expr::Kind::kConst, s_.peek());
          index->constant = s_.next().number;
          item->args.push_back(std::move(e));
          item->args.push_back(std::move(index));
          e = std::move(item);
        } else {
          auto attr = make_expr(Expr::Kind::kAttr, at);
          attr->name = s_.expect_name();
          attr->args.push_back(std::move(e));
          e = std::move(attr);
        }
      } else if (s_.is_op("[")) {
        s_.next();
        e = parse_subscript(std::move(e), at);
      } else if (s_.is_op("(")) {
        e = parse_call(std::move(e), at);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target, const Token& at) {
    ExprPtr start, stop, step;
    if (!s_.is_op(":")) {
      start = parse_expression();
      if (s_.is_op("]")) {
        s_.next();
        auto item = make_expr(Expr::Kind::kItem, at);
        item->args.push_back(std::move(target));
        item->args.push_back(std::move(start));
        return item;
      }
    }
    s_.expect_op(":");
    if (!s_.is_op("]") && !s_.is_op(":")) stop = parse_expression();
    if (s_.is_op(":")) {
      s_.next();
      if (!s_.is_op("]")) step = parse_expression();
    }
    s_.expect_op("]");
    auto slice = make_expr(Expr::Kind::kSlice, at);
    slice->args.push_back(std::move(target));
    slice->args.push_back(std::move(start));
    slice->args.push_back(std::move(stop));
    slice->args.push_back(std::move(step));
    return slice;
  }

  // Arguments "(a, b, key=c)" into e->args (after what is already there) and e->kwargs.
  void parse_arguments(Expr& e) {
    s_.expect_op("(");
    bool first = true;
    while (!s_.is_op(")")) {
      if (!first) {
        s_.expect_op(",");
        if (s_.is_op(")")) break;
      }
      first = false;
      if (s_.is_op("*") || s_.is_op("**"))
        TokenStream::fail(s_.peek(), "*args and **kwargs are not supported");
      if (s_.peek().kind == TokenKind::kName && s_.is_op("=", 1)) {
        std::string key = s_.next().text;
        s_.next();
        e.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        if (!e.kwargs.empty())
          TokenStream::fail(s_.peek(), "a positional argument follows a keyword argument");
        e.args.push_back(parse_expression());
      }
    }
    s_.next();
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
      const Token& at = s_.peek();
      if (s_.is_op("|")) {
        s_.next();
        const Token& name_token = s_.peek();
        auto filter = make_expr(Expr::Kind::kFilter, at);
        filter->name = s_.expect_name();
        if (!is_known_filter(filter->name))
          TokenStream::fail(name_token, "no filter named '" + filter->name + "'");
        filter->args.push_back(std::move(e));
        if (s_.is_op("(")) parse_arguments(*filter);
        e = std::move(filter);
      } else if (s_.is_name("is")) {
        s_.next();
        auto test = make_expr(Expr::Kind::kTest, at);
        if (s_.is_name("not")) {
          s_.next();
          test->negated = true;
        }
        const Token& name_token = s_.peek();
        test->name = s_.expect_name();
        if (!is_known_test(test->name))
          TokenStream::fail(name_token, "no test named '" + test->name + "'");
        test->args.push_back(std::move(e));
        const Token& n = s_.peek();
        if (s_.is_op("(")) {
          parse_arguments(*test);
        } else if ((n.kind == TokenKind::kName || n.kind == TokenKind::kString ||
                    n.kind == TokenKind::kInteger || n.kind == TokenKind::kFloat || s_.is_op("[") ||
                    s_.is_op("{")) &&
                   !s_.is_name("else") && !s_.is_name("or") && !s_.is_name("and")) {
          if (s_.is_name("is")) TokenStream::fail(n, "tests cannot be chained with 'is'");
          test->args.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(test);
      } else if (s_.is_op("(")) {
        e = parse_call(std::move(e), at);
      } else {
        return e;
      }
    }
  }

 private:
  TokenStream& s_;
};

}  // namespace

ExprPtr parse_expression(TokenStream& stream) {
  return ExpressionParser(stream).parse_expression();
}

ExprPtr parse_tuple(TokenStream& stream, bool with_condition) {
  return ExpressionParser(stream).parse_tuple(with_condition);
}

}  // namespace weft::jinja
