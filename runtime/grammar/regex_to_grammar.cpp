#include "runtime/grammar/regex_to_grammar.hpp"

#include <algorithm>
#include <cctype>
#include <map>

namespace weft::grammar {
namespace {

constexpr int kMaxNesting = 200;
// The largest bound of a repetition, written ({m,n}) or made by nesting (`(a{0,400}){0,400}` is
// a{0,160000}): docs/grammars.md, "Regular expressions".
constexpr std::uint64_t kMaxCopies = 100000;

const std::vector<CodepointRange> kDigit{{'0', '9'}};
const std::vector<CodepointRange> kWord{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// ECMAScript \s: whitespace and line terminators.
const std::vector<CodepointRange> kSpace{
    {0x09, 0x0D},     {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
    {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};

class RegexParser {
 public:
  RegexParser(Grammar& g, std::string_view p, const RegexOptions& o) : g_(g), p_(p), o_(o) {}

  Result<ExprId> run() {
    std::vector<ExprId> alts;
    for (;;) {
      bool start_anchor = false;
      if (i_ < p_.size() && p_[i_] == '^') {
        start_anchor = true;
        ++i_;
      }
      auto seq = sequence(0, true);
      if (!seq) return seq.error();
      bool end_anchor = false;
      if (i_ < p_.size() && p_[i_] == '$') {
        end_anchor = true;
        ++i_;
      }
      std::vector<ExprId> parts;
      if (o_.search && !start_anchor) parts.push_back(g_.star(any()));
      parts.push_back(*seq);
      if (o_.search && !end_anchor) parts.push_back(g_.star(any()));
      alts.push_back(g_.sequence(std::move(parts)));
      if (i_ >= p_.size()) break;
      if (p_[i_] == '|') {
        ++i_;
        continue;
      }
      if (p_[i_] == ')') return fail(i_, "unmatched ')'");
      return fail(
          i_,
          "anchor '$' is supported only at the end of the pattern or of a top-level alternative");
    }
    return g_.choice(std::move(alts));
  }

 private:
  Error fail(std::size_t at, const std::string& what) const {
    return Error(ErrorCode::kParse, "regex at offset " + std::to_string(at) + ": " + what +
                                        " (in /" + std::string(p_) + "/)");
  }

  // A set's UTF-8 expression is built once per pattern and shared by each use (expressions
  // never change once made): `.` or \w repeated throughout a pattern would otherwise rebuild
  // the same byte-range tree each time.
  ExprId chars(const std::vector<CodepointRange>& set) {
    std::vector<std::pair<std::uint32_t, std::uint32_t>> key;
    key.reserve(set.size());
    for (const auto& r : set)
      key.emplace_back(r.lo, r.hi);
    if (auto it = chars_made_.find(key); it != chars_made_.end()) return it->second;
    const ExprId id = o_.json_string ? json_string_char(g_, set) : g_.codepoints(set);
    chars_made_.emplace(std::move(key), id);
    return id;
  }
  // `.` in ECMAScript: anything but line terminators.
  ExprId any() { return chars(complement_ranges({{0x0A, 0x0A}, {0x0D, 0x0D}, {0x2028, 0x2029}})); }

  Result<ExprId> alternation(int depth) {
    std::vector<ExprId> alts;
    for (;;) {
      auto seq = sequence(depth, false);
      if (!seq) return seq.error();
      alts.push_back(*seq);
      if (i_ < p_.size() && p_[i_] == '|') {
        ++i_;
        continue;
      }
      return g_.choice(std::move(alts));
    }
  }

  Result<ExprId> sequence(int depth, bool top) {
    std::vector<ExprId> items;
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
      if (p_[i_] == '$' && top) {
        // Only valid at the end of a top-level alternative; run() checks what follows.
        if (i_ + 1 == p_.size() || p_[i_ + 1] == '|') break;
        return fail(i_, "anchor '$' is supported only at the end of the pattern");
      }
      if (p_[i_] == '^' || p_[i_] == '$')
        return fail(i_, "anchors are supported only at the ends of the pattern");
      auto atom = this->atom(depth);
      if (!atom) return atom.error();
      auto q = quantifier(*atom);
      if (!q) return q.error();
      items.push_back(*q);
    }
    return g_.sequence(std::move(items));
  }

  Result<ExprId> quantifier(ExprId atom) {
    if (i_ >= p_.size()) return atom;
    std::size_t at = i_;
    std::uint32_t lo = 0, hi = kUnbounded;
    char c = p_[i_];
    if (c == '*') {
      ++i_;
    } else if (c == '+') {
      lo = 1;
      ++i_;
    } else if (c == '?') {
      hi = 1;
      ++i_;
    } else if (c == '{' && i_ + 1 < p_.size() &&
               std::isdigit(static_cast<unsigned char>(p_[i_ + 1]))) {
      ++i_;
      auto a = number();
      if (!a) return a.error();
      lo = hi = *a;
      if (i_ < p_.size() && p_[i_] == ',') {
        ++i_;
        hi = kUnbounded;
        if (i_ < p_.size() && p_[i_] != '}') {
          auto b = number();
          if (!b) return b.error();
          hi = *b;
        }
      }
      if (i_ >= p_.size() || p_[i_] != '}') return fail(i_, "expected '}' to close the quantifier");
      ++i_;
      if (hi < lo)
        return fail(at, "quantifier {" + std::to_string(lo) + "," + std::to_string(hi) +
                            "} has its minimum above its maximum");
    } else {
      return atom;
    }
    if (i_ < p_.size() && p_[i_] == '?') ++i_;  // lazy: same language
    if (i_ < p_.size() && (p_[i_] == '*' || p_[i_] == '+' || p_[i_] == '?' || p_[i_] == '{'))
      return fail(i_, "nothing to repeat");
    return repetition(atom, lo, hi, at);
  }

  // Whether every match of `id` is empty (an empty group, `()*`), or some may be: the regex
  // front end builds no rule references, so both follow the expression tree.
  bool only_empty(ExprId id) const {
    const Expr& e = g_.expr(id);
    switch (e.kind) {
      case Expr::Kind::kSequence:
      case Expr::Kind::kChoice:
        return (e.kind == Expr::Kind::kSequence || !e.children.empty()) &&
               std::all_of(e.children.begin(), e.children.end(),
                           [&](ExprId c) { return only_empty(c); });
      case Expr::Kind::kRepeat:
        return e.max == 0 || only_empty(e.children[0]);
      default:
        return false;
    }
  }
  bool nullable(ExprId id) const {
    const Expr& e = g_.expr(id);
    switch (e.kind) {
      case Expr::Kind::kSequence:
        return std::all_of(e.children.begin(), e.children.end(),
                           [&](ExprId c) { return nullable(c); });
      case Expr::Kind::kChoice:
        return std::any_of(e.children.begin(), e.children.end(),
                           [&](ExprId c) { return nullable(c); });
      case Expr::Kind::kRepeat:
        return e.min == 0 || nullable(e.children[0]);
      default:
        return false;
    }
  }

  // The non-empty matches of a nullable expression that is not only empty: its every match but
  // the empty string, as an expression whose every match consumes a byte. Relies on every
  // repetition having been built by repetition() below (its item never matches empty).
  ExprId non_empty(ExprId id) {
    const Expr e = g_.expr(id);  // a copy: building expressions may move the table
    if (!nullable(id)) return id;
    switch (e.kind) {
      case Expr::Kind::kSequence: {
        // Some item matches something: the first that does, then the rest as they are.
        std::vector<ExprId> alts;
        for (std::size_t i = 0; i < e.children.size(); ++i) {
          if (only_empty(e.children[i])) continue;
          std::vector<ExprId> items{non_empty(e.children[i])};
          items.insert(items.end(), e.children.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                       e.children.end());
          alts.push_back(g_.sequence(std::move(items)));
        }
        return g_.choice(std::move(alts));
      }
      case Expr::Kind::kChoice: {
        std::vector<ExprId> alts;
        for (ExprId c : e.children)
          if (!only_empty(c)) alts.push_back(non_empty(c));
        return g_.choice(std::move(alts));
      }
      case Expr::Kind::kRepeat:  // x{0,n} with x never empty: x{1,n}
        return g_.repeat(e.children[0], 1, e.max);
      default:
        return id;
    }
  }

  // x{lo,hi}, built so that x never matches the empty string: the grammar compiler then makes
  // a bound over 32 one counted element (grammar_compiler.hpp) whatever x is, instead of a chain
  // of hi optional copies. `(){1,3000}`, `(a?){4000}` and `((a?){100}){100}` compiled to chains
  // of thousands of rules that took seconds (tests/fuzz). The same language:
  //   - x only ever empty (`()`, `(){5}`): x{lo,hi} is empty;
  //   - x may be empty: x{lo,hi} = x{0,hi} = (x without its empty match){0,hi}, and where x is
  //     itself y{0,b}, (y{0,b}){0,hi} = y{0,b*hi}: nested bounds multiply, checked here against
  //     kMaxCopies before anything is built.
  Result<ExprId> repetition(ExprId atom, std::uint32_t lo, std::uint32_t hi, std::size_t at) {
    if (only_empty(atom) || hi == 0) return g_.empty();
    if (!nullable(atom)) return g_.repeat(atom, lo, hi);
    const Expr inner = g_.expr(atom);
    if (inner.kind == Expr::Kind::kRepeat) {
      // y{0,b}: y never matches empty (built here).
      std::uint64_t copies =
          inner.max == kUnbounded || hi == kUnbounded ? kUnbounded : std::uint64_t{inner.max} * hi;
      if (copies != kUnbounded && copies > kMaxCopies)
        return fail(at, "repetition {" + std::to_string(lo) + "," + std::to_string(hi) +
                            "} of a group repeated up to " + std::to_string(inner.max) +
                            " times expands to " + std::to_string(copies) +
                            " copies, above the limit of " + std::to_string(kMaxCopies));
      return g_.repeat(inner.children[0], 0, static_cast<std::uint32_t>(copies));
    }
    return g_.repeat(non_empty(atom), 0, hi);
  }

  Result<std::uint32_t> number() {
    std::size_t b = i_;
    std::uint64_t v = 0;
    while (i_ < p_.size() && std::isdigit(static_cast<unsigned char>(p_[i_]))) {
      v = v * 10 + static_cast<unsigned>(p_[i_++] - '0');
      if (v > kMaxCopies)
        return fail(b, "repetition count above the limit of " + std::to_string(kMaxCopies));
    }
    if (i_ == b) return fail(b, "expected a number");
    return static_cast<std::uint32_t>(v);
  }

  Result<ExprId> atom(int depth) {
    std::size_t at = i_;
    char c = p_[i_];
    switch (c) {
      case '(': {
        if (depth >= kMaxNesting) return fail(at, "groups nested too deeply");
        ++i_;
        if (p_.substr(i_).starts_with("?:")) {
          i_ += 2;
        } else if (p_.substr(i_).starts_with("?<") && !p_.substr(i_).starts_with("?<=") &&
                   !p_.substr(i_).starts_with("?<!")) {
          auto close = p_.find('>', i_);
          if (close == std::string_view::npos) return fail(at, "unterminated group name");
          i_ = close + 1;
        } else if (i_ < p_.size() && p_[i_] == '?') {
          return fail(at, "lookaround groups are not supported");
        }
        auto inner = alternation(depth + 1);
        if (!inner) return inner.error();
        if (i_ >= p_.size() || p_[i_] != ')') return fail(at, "group is not closed");
        ++i_;
        return inner;
      }
      case '[':
        return char_class();
      case '.':
        ++i_;
        return any();
      case '*':
      case '+':
      case '?':
        return fail(at, "nothing to repeat");
      case '{':
        if (i_ + 1 < p_.size() && std::isdigit(static_cast<unsigned char>(p_[i_ + 1])))
          return fail(at, "nothing to repeat");
        break;
      case '\\': {
        ++i_;
        std::vector<CodepointRange> set;
        auto r = escape(set, false);
        if (!r) return r.error();
        return chars(set);
      }
      default:
        break;
    }
    auto cp = literal_char();
    if (!cp) return cp.error();
    return chars({{*cp, *cp}});
  }

  Result<std::uint32_t> literal_char() {
    unsigned char c = static_cast<unsigned char>(p_[i_]);
    std::size_t n = c < 0x80 ? 1 : c < 0xC0 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF8 ? 4 : 0;
    if (n == 0 || i_ + n > p_.size()) return fail(i_, "invalid UTF-8");
    std::uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    for (std::size_t k = 1; k < n; ++k) {
      unsigned char cc = static_cast<unsigned char>(p_[i_ + k]);
      if ((cc & 0xC0) != 0x80) return fail(i_, "invalid UTF-8");
      cp = (cp << 6) | (cc & 0x3F);
    }
    i_ += n;
    return cp;
  }

  // After a backslash: adds the escaped set to `set`. Returns the single code point when the
  // escape is one character (so class ranges can use it), or 0xFFFFFFFF for a class escape.
  Result<std::uint32_t> escape(std::vector<CodepointRange>& set, bool in_class) {
    std::size_t at = i_ - 1;
    if (i_ >= p_.size()) return fail(at, "pattern ends with a backslash");
    char c = p_[i_++];
    auto add_class = [&](const std::vector<CodepointRange>& cls, bool negate) -> std::uint32_t {
      auto s = negate ? complement_ranges(cls) : cls;
      set.insert(set.end(), s.begin(), s.end());
      return 0xFFFFFFFFu;
    };
    auto single = [&](std::uint32_t cp) -> std::uint32_t {
      set.push_back({cp, cp});
      return cp;
    };
    auto hex = [&](int n) -> Result<std::uint32_t> {
      std::uint32_t v = 0;
      for (int k = 0; k < n; ++k) {
        if (i_ >= p_.size() || !std::isxdigit(static_cast<unsigned char>(p_[i_])))
          return fail(at, "expected " + std::to_string(n) + " hex digits after \\" + c);
        char h = p_[i_++];
        v = v * 16 + static_cast<std::uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                    ? h - '0'
                                                    : std::tolower(h) - 'a' + 10);
      }
      return v;
    };
    switch (c) {
      case 'd':
        return add_class(kDigit, false);
      case 'D':
        return add_class(kDigit, true);
      case 'w':
        return add_class(kWord, false);
      case 'W':
        return add_class(kWord, true);
      case 's':
        return add_class(kSpace, false);
      case 'S':
        return add_class(kSpace, true);
      case 'n':
        return single(0x0A);
      case 'r':
        return single(0x0D);
      case 't':
        return single(0x09);
      case 'f':
        return single(0x0C);
      case 'v':
        return single(0x0B);
      case '0':
        return single(0);
      case 'x': {
        auto v = hex(2);
        if (!v) return v;
        return single(*v);
      }
      case 'u': {
        auto v = hex(4);
        if (!v) return v;
        return single(*v);
      }
      case 'b':
        if (in_class) return single(0x08);
        return fail(at, "word boundary \\b is not supported");
      case 'B':
        return fail(at, "\\B is not supported");
      default:
        break;
    }
    if (c >= '1' && c <= '9') return fail(at, "backreferences are not supported");
    if (std::isalnum(static_cast<unsigned char>(c)))
      return fail(at, std::string("unknown escape \\") + c);
    --i_;
    auto cp = literal_char();
    if (!cp) return cp;
    return single(*cp);
  }

  Result<ExprId> char_class() {
    std::size_t at = i_++;
    bool negate = i_ < p_.size() && p_[i_] == '^';
    if (negate) ++i_;
    std::vector<CodepointRange> set;
    bool first = true;
    for (;;) {
      if (i_ >= p_.size()) return fail(at, "character class is not closed");
      if (p_[i_] == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      std::uint32_t lo;
      if (p_[i_] == '\\') {
        ++i_;
        std::vector<CodepointRange> tmp;
        auto r = escape(tmp, true);
        if (!r) return r.error();
        set.insert(set.end(), tmp.begin(), tmp.end());
        if (*r == 0xFFFFFFFFu) continue;
        lo = *r;
        set.pop_back();
      } else {
        auto cp = literal_char();
        if (!cp) return cp.error();
        lo = *cp;
      }
      std::uint32_t hi = lo;
      if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        std::size_t dash = i_++;
        if (p_[i_] == '\\') {
          ++i_;
          std::vector<CodepointRange> tmp;
          auto r = escape(tmp, true);
          if (!r) return r.error();
          if (*r == 0xFFFFFFFFu) return fail(dash, "a class escape cannot end a range");
          hi = *r;
        } else {
          auto cp = literal_char();
          if (!cp) return cp.error();
          hi = *cp;
        }
        if (hi < lo) return fail(dash, "range out of order in character class");
      }
      set.push_back({lo, hi});
    }
    if (negate) set = complement_ranges(set);
    if (normalize_ranges(set).empty()) return fail(at, "character class matches nothing");
    return chars(set);
  }

  Grammar& g_;
  std::string_view p_;
  RegexOptions o_;
  std::map<std::vector<std::pair<std::uint32_t, std::uint32_t>>, ExprId> chars_made_;
  std::size_t i_ = 0;
};

}  // namespace

ExprId json_string_char(Grammar& g, const std::vector<CodepointRange>& set) {
  auto plain = normalize_ranges(set);
  std::vector<ExprId> alts;
  // Code points JSON must escape: the control characters, '"' and '\\'.
  std::vector<CodepointRange> safe;
  for (const auto& r : plain) {
    for (std::uint32_t cp = r.lo; cp <= std::min<std::uint32_t>(r.hi, 0x5C); ++cp) {
      if (cp < 0x20 || cp == '"' || cp == '\\') {
        static const char* kShort[] = {nullptr, nullptr, nullptr, nullptr, nullptr,
                                       nullptr, nullptr, nullptr, "\\b",   "\\t",
                                       "\\n",   nullptr, "\\f",   "\\r"};
        std::string esc;
        if (cp < 14 && kShort[cp]) {
          esc = kShort[cp];
        } else if (cp == '"') {
          esc = "\\\"";
        } else if (cp == '\\') {
          esc = "\\\\";
        } else {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", cp);
          esc = buf;
        }
        alts.push_back(g.literal(esc));
      }
    }
  }
  auto safe_set = normalize_ranges(set);
  std::vector<CodepointRange> forbidden{{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
  auto allowed = complement_ranges(forbidden);
  // safe = set ∩ allowed
  for (const auto& a : safe_set)
    for (const auto& b : allowed) {
      std::uint32_t lo = std::max(a.lo, b.lo), hi = std::min(a.hi, b.hi);
      if (lo <= hi) safe.push_back({lo, hi});
    }
  if (!safe.empty()) alts.insert(alts.begin(), g.codepoints(safe));
  if (alts.empty()) return g.bytes(ByteSet{});
  return g.choice(std::move(alts));
}

Result<ExprId> regex_to_expr(Grammar& g, std::string_view pattern, const RegexOptions& options) {
  return RegexParser(g, pattern, options).run();
}

Result<Grammar> regex_to_grammar(std::string_view pattern) {
  Grammar g;
  RuleId root = g.add_rule("root");
  auto e = regex_to_expr(g, pattern);
  if (!e) return e.error();
  g.set_body(root, *e);
  g.set_root(root);
  return g;
}

}  // namespace weft::grammar
