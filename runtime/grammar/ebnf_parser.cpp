#include "runtime/grammar/ebnf_parser.hpp"

#include <map>

#include "runtime/grammar/grammar_compiler.hpp"

namespace weft::grammar {
namespace {

// Parentheses deeper than this are refused rather than risking the parser's own stack.
constexpr int kMaxNesting = 200;

class EbnfParser {
 public:
  explicit EbnfParser(std::string_view text) : s_(text) {}

  Result<Grammar> run() {
    skip_space();
    while (i_ < s_.size()) {
      std::size_t at = i_;
      std::string name = identifier();
      if (name.empty()) return fail(at, "expected a rule name");
      skip_space();
      if (!s_.substr(i_).starts_with("::="))
        return fail(i_, "expected '::=' after rule name '" + name + "'");
      i_ += 3;
      RuleId id = rule_id(name, at);
      if (g_.rule(id).body) return fail(at, "rule '" + name + "' is defined twice");
      defined_at_[name] = at;
      auto body = alternation(0);
      if (!body) return body.error();
      g_.set_body(id, *body);
      skip_space();
    }
    for (const auto& [name, at] : referenced_at_)
      if (!defined_at_.count(name))
        return fail(at, "rule '" + name + "' is used but never defined");
    auto root = g_.find_rule("root");
    if (!root) return fail(0, "the grammar has no rule named 'root'");
    g_.set_root(*root);
    // Left recursion and rules that never finish are found on the flat form; report them at
    // the rule's definition.
    auto flat = flatten_grammar(g_);
    if (!flat) {
      std::string msg = flat.error().what();
      for (const auto& [name, at] : defined_at_)
        if (msg.find("'" + name + "'") != std::string::npos ||
            msg.find("'" + name + "#") != std::string::npos)
          return fail(at, msg);
      return Error(flat.error().code(), "grammar: " + msg);
    }
    flat_ = std::move(flat.value());
    return std::move(g_);
  }

  // The flat form that run() checked (valid after a successful run()).
  FlatGrammar take_flat() { return std::move(flat_); }

 private:
  Error fail(std::size_t at, const std::string& what) const {
    std::size_t line = 1, col = 1;
    for (std::size_t k = 0; k < at && k < s_.size(); ++k) {
      if (s_[k] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return Error(ErrorCode::kParse, "grammar line " + std::to_string(line) + ", column " +
                                        std::to_string(col) + ": " + what);
  }

  void skip_space() {
    while (i_ < s_.size()) {
      if (s_[i_] == '#') {
        while (i_ < s_.size() && s_[i_] != '\n')
          ++i_;
      } else if (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r') {
        ++i_;
      } else {
        break;
      }
    }
  }
  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  }
  std::string identifier() {
    std::size_t b = i_;
    if (i_ < s_.size() && (std::isalpha(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_'))
      while (i_ < s_.size() && name_char(s_[i_]))
        ++i_;
    return std::string(s_.substr(b, i_ - b));
  }
  // Is the text at i_ the start of the next rule definition (`name ::=`)?
  bool at_definition() const {
    std::size_t k = i_;
    if (k >= s_.size() || !(std::isalpha(static_cast<unsigned char>(s_[k])) || s_[k] == '_'))
      return false;
    while (k < s_.size() && name_char(s_[k]))
      ++k;
    while (k < s_.size() && (s_[k] == ' ' || s_[k] == '\t' || s_[k] == '\n' || s_[k] == '\r'))
      ++k;
    return s_.substr(k).starts_with("::=");
  }
  RuleId rule_id(const std::string& name, std::size_t at) {
    if (auto r = g_.find_rule(name)) return *r;
    referenced_at_.emplace(name, at);
    return g_.add_rule(name);
  }

  Result<ExprId> alternation(int depth) {
    if (depth > kMaxNesting)
      return fail(i_, "groups nested more than " + std::to_string(kMaxNesting) + " deep");
    std::vector<ExprId> alts;
    for (;;) {
      auto seq = sequence(depth);
      if (!seq) return seq.error();
      alts.push_back(*seq);
      skip_space();
      if (i_ < s_.size() && s_[i_] == '|') {
        ++i_;
        continue;
      }
      return g_.choice(std::move(alts));
    }
  }

  Result<ExprId> sequence(int depth) {
    std::vector<ExprId> items;
    for (;;) {
      skip_space();
      if (i_ >= s_.size() || s_[i_] == '|' || s_[i_] == ')' || at_definition()) break;
      auto item = primary(depth);
      if (!item) return item.error();
      auto rep = postfix(*item);
      if (!rep) return rep.error();
      items.push_back(*rep);
    }
    return g_.sequence(std::move(items));
  }

  Result<ExprId> postfix(ExprId item) {
    // A handful of stacked operators (x*? and the like) is plenty; thousands would only nest
    // the expression deep enough to threaten the compiler's recursion.
    for (int stacked = 0;; ++stacked) {
      if (stacked > 4) return fail(i_, "too many repetition operators in a row");
      if (i_ >= s_.size()) return item;
      char c = s_[i_];
      if (c == '*') {
        ++i_;
        item = g_.star(item);
      } else if (c == '+') {
        ++i_;
        item = g_.plus(item);
      } else if (c == '?') {
        ++i_;
        item = g_.optional(item);
      } else if (c == '{') {
        std::size_t at = i_++;
        auto lo = number();
        if (!lo) return fail(i_, "expected a number after '{'");
        std::uint32_t hi = *lo;
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          auto h = number();
          hi = h ? *h : kUnbounded;
        }
        if (i_ >= s_.size() || s_[i_] != '}')
          return fail(i_, "expected '}' to close the repetition");
        ++i_;
        if (hi < *lo)
          return fail(at, "repetition {" + std::to_string(*lo) + "," + std::to_string(hi) +
                              "} has its minimum above its maximum");
        item = g_.repeat(item, *lo, hi);
      } else {
        return item;
      }
    }
  }

  std::optional<std::uint32_t> number() {
    std::size_t b = i_;
    std::uint64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      v = v * 10 + static_cast<unsigned>(s_[i_++] - '0');
      if (v > 1000000) return std::nullopt;
    }
    if (i_ == b) return std::nullopt;
    return static_cast<std::uint32_t>(v);
  }

  Result<ExprId> primary(int depth) {
    std::size_t at = i_;
    char c = s_[i_];
    if (c == '"') return literal();
    if (c == '[') return char_class();
    if (c == '.') {
      ++i_;
      return g_.codepoints({{0, 0x10FFFF}});
    }
    if (c == '(') {
      ++i_;
      auto inner = alternation(depth + 1);
      if (!inner) return inner.error();
      skip_space();
      if (i_ >= s_.size() || s_[i_] != ')')
        return fail(i_, "expected ')' to close the group opened at " + where(at));
      ++i_;
      return inner;
    }
    std::string name = identifier();
    if (name.empty()) return fail(at, std::string("unexpected character '") + c + "'");
    return g_.ref(rule_id(name, at));
  }

  std::string where(std::size_t at) const {
    std::string m = fail(at, "").what();
    return m.substr(8, m.size() - 10);  // "line L, column C"
  }

  // One escape after a backslash; returns the code point, or a raw byte (>= 0x110000 marks it)
  // for \xHH inside strings.
  Result<std::uint32_t> escape(bool in_string) {
    std::size_t at = i_ - 1;
    if (i_ >= s_.size()) return fail(at, "unfinished escape");
    char c = s_[i_++];
    auto hex = [&](int n) -> Result<std::uint32_t> {
      std::uint32_t v = 0;
      for (int k = 0; k < n; ++k) {
        if (i_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_])))
          return fail(i_, "expected " + std::to_string(n) + " hex digits in the escape");
        char h = s_[i_++];
        v = v * 16 + static_cast<std::uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                    ? h - '0'
                                                    : (std::tolower(h) - 'a' + 10));
      }
      return v;
    };
    switch (c) {
      case 'n':
        return 0x0Au;
      case 'r':
        return 0x0Du;
      case 't':
        return 0x09u;
      case '0':
        return 0x00u;
      case 'x': {
        auto v = hex(2);
        if (!v) return v;
        return in_string ? *v + 0x110000u : *v;
      }
      case 'u':
        return hex(4);
      case 'U': {
        auto v = hex(8);
        if (v && *v > 0x10FFFF) return fail(at, "code point beyond U+10FFFF");
        return v;
      }
      case '\\':
      case '"':
      case '\'':
      case '[':
      case ']':
      case '-':
      case '^':
      case '/':
        return static_cast<std::uint32_t>(c);
      default:
        return fail(at, std::string("unknown escape '\\") + c + "'");
    }
  }

  Result<ExprId> literal() {
    std::size_t at = i_++;
    std::string bytes;
    for (;;) {
      if (i_ >= s_.size()) return fail(at, "string literal is not closed");
      char c = s_[i_++];
      if (c == '"') break;
      if (c == '\n') return fail(at, "string literal is not closed before the end of the line");
      if (c != '\\') {
        bytes += c;
        continue;
      }
      auto cp = escape(true);
      if (!cp) return cp.error();
      if (*cp >= 0x110000)
        bytes += static_cast<char>(*cp - 0x110000);
      else
        append_utf8(bytes, *cp);
    }
    return g_.literal(bytes);
  }

  // One code point of the class text (UTF-8 decoded) or an escape.
  Result<std::uint32_t> class_char() {
    unsigned char c = static_cast<unsigned char>(s_[i_]);
    if (c == '\\') {
      ++i_;
      return escape(false);
    }
    std::size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (i_ + n > s_.size() || (c >= 0x80 && c < 0xC0))
      return fail(i_, "invalid UTF-8 in character class");
    std::uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    for (std::size_t k = 1; k < n; ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s_[i_ + k]) & 0x3F);
    i_ += n;
    return cp;
  }

  Result<ExprId> char_class() {
    std::size_t at = i_++;
    bool negate = i_ < s_.size() && s_[i_] == '^';
    if (negate) ++i_;
    std::vector<CodepointRange> set;
    for (;;) {
      if (i_ >= s_.size() || s_[i_] == '\n') return fail(at, "character class is not closed");
      if (s_[i_] == ']') {
        ++i_;
        break;
      }
      auto lo = class_char();
      if (!lo) return lo.error();
      std::uint32_t hi = *lo;
      if (i_ + 1 < s_.size() && s_[i_] == '-' && s_[i_ + 1] != ']') {
        ++i_;
        auto h = class_char();
        if (!h) return h.error();
        hi = *h;
        if (hi < *lo) return fail(at, "character class range is reversed");
      }
      set.push_back({*lo, hi});
    }
    if (negate) set = complement_ranges(set);
    if (set.empty()) return fail(at, "character class matches nothing");
    return g_.codepoints(std::move(set));
  }

  std::string_view s_;
  std::size_t i_ = 0;
  Grammar g_;
  FlatGrammar flat_;
  std::map<std::string, std::size_t> defined_at_;
  std::map<std::string, std::size_t> referenced_at_;
};

}  // namespace

Result<Grammar> parse_ebnf(std::string_view text) {
  return EbnfParser(text).run();
}

Result<FlatGrammar> parse_ebnf_flat(std::string_view text) {
  EbnfParser parser(text);
  auto grammar = parser.run();
  if (!grammar) return grammar.error();
  return parser.take_flat();
}

}  // namespace weft::grammar
