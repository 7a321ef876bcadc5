#include "runtime/grammar/grammar.hpp"

#include <algorithm>
#include <bit>
#include <cstdio>

namespace weft::grammar {

int ByteSet::count() const {
  int n = 0;
  for (auto w : words)
    n += std::popcount(w);
  return n;
}

ExprId Grammar::add(Expr e) {
  exprs_.push_back(std::move(e));
  return static_cast<ExprId>(exprs_.size() - 1);
}

ExprId Grammar::bytes(const ByteSet& set) {
  Expr e;
  e.kind = Expr::Kind::kBytes;
  e.bytes = set;
  return add(std::move(e));
}

ExprId Grammar::literal(std::string_view text) {
  std::vector<ExprId> items;
  items.reserve(text.size());
  for (char c : text)
    items.push_back(byte(static_cast<std::uint8_t>(c)));
  if (items.size() == 1) return items[0];
  return sequence(std::move(items));
}

ExprId Grammar::ref(RuleId rule) {
  Expr e;
  e.kind = Expr::Kind::kRule;
  e.rule = rule;
  return add(std::move(e));
}

ExprId Grammar::sequence(std::vector<ExprId> items) {
  if (items.size() == 1) return items[0];
  Expr e;
  e.kind = Expr::Kind::kSequence;
  e.children = std::move(items);
  return add(std::move(e));
}

ExprId Grammar::choice(std::vector<ExprId> items) {
  if (items.size() == 1) return items[0];
  Expr e;
  e.kind = Expr::Kind::kChoice;
  e.children = std::move(items);
  return add(std::move(e));
}

ExprId Grammar::repeat(ExprId item, std::uint32_t min, std::uint32_t max) {
  Expr e;
  e.kind = Expr::Kind::kRepeat;
  e.children = {item};
  e.min = min;
  e.max = max;
  return add(std::move(e));
}

RuleId Grammar::add_rule(std::string name) {
  rules_.push_back(Rule{std::move(name), std::nullopt});
  return static_cast<RuleId>(rules_.size() - 1);
}

std::optional<RuleId> Grammar::find_rule(std::string_view name) const {
  for (std::size_t i = 0; i < rules_.size(); ++i)
    if (rules_[i].name == name) return static_cast<RuleId>(i);
  return std::nullopt;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::vector<CodepointRange> normalize_ranges(std::vector<CodepointRange> set) {
  std::vector<CodepointRange> out;
  for (auto& r : set)
    r.hi = std::min<std::uint32_t>(r.hi, 0x10FFFF);
  std::erase_if(set, [](const CodepointRange& r) { return r.lo > r.hi; });
  std::sort(set.begin(), set.end(), [](auto& a, auto& b) { return a.lo < b.lo; });
  for (const auto& r : set) {
    if (!out.empty() && r.lo <= out.back().hi + 1)
      out.back().hi = std::max(out.back().hi, r.hi);
    else
      out.push_back(r);
  }
  return out;
}

std::vector<CodepointRange> complement_ranges(const std::vector<CodepointRange>& set) {
  std::vector<CodepointRange> out;
  std::uint32_t next = 0;
  for (const auto& r : normalize_ranges(set)) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return out;
}

namespace {

// The byte sequences between two UTF-8 encodings of the same length, in lexicographic order.
// Every sequence between two valid encodings of one length is itself valid once the ranges
// are split at the length boundaries and around the surrogates, so this is the usual
// prefix-splitting construction (as in RE2's UTF-8 compiler).
ExprId utf8_between(Grammar& g, const std::uint8_t* lo, const std::uint8_t* hi, int n) {
  if (n == 1) return g.bytes(ByteSet::range(lo[0], hi[0]));
  if (lo[0] == hi[0]) return g.sequence({g.byte(lo[0]), utf8_between(g, lo + 1, hi + 1, n - 1)});
  static constexpr std::uint8_t kMin[4] = {0x80, 0x80, 0x80, 0x80};
  static constexpr std::uint8_t kMax[4] = {0xBF, 0xBF, 0xBF, 0xBF};
  auto all = [&](const std::uint8_t* p, std::uint8_t v) {
    for (int i = 0; i < n - 1; ++i)
      if (p[i] != v) return false;
    return true;
  };
  std::vector<ExprId> alts;
  unsigned first = lo[0];
  unsigned last = hi[0];
  if (!all(lo + 1, 0x80)) {
    alts.push_back(g.sequence({g.byte(lo[0]), utf8_between(g, lo + 1, kMax, n - 1)}));
    ++first;
  }
  bool hi_full = all(hi + 1, 0xBF);
  if (!hi_full) --last;
  if (first <= last) {
    std::vector<ExprId> seq{
        g.bytes(ByteSet::range(static_cast<std::uint8_t>(first), static_cast<std::uint8_t>(last)))};
    for (int i = 1; i < n; ++i)
      seq.push_back(g.bytes(ByteSet::range(0x80, 0xBF)));
    alts.push_back(g.sequence(std::move(seq)));
  }
  if (!hi_full) alts.push_back(g.sequence({g.byte(hi[0]), utf8_between(g, kMin, hi + 1, n - 1)}));
  return g.choice(std::move(alts));
}

}  // namespace

ExprId Grammar::codepoints(std::vector<CodepointRange> set) {
  // Split at encoding-length boundaries and remove the surrogates.
  static constexpr CodepointRange kPieces[] = {
      {0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, 0x10FFFF}};
  std::vector<ExprId> alts;
  ByteSet ascii;
  for (const auto& r : normalize_ranges(std::move(set))) {
    for (const auto& piece : kPieces) {
      std::uint32_t lo = std::max(r.lo, piece.lo);
      std::uint32_t hi = std::min(r.hi, piece.hi);
      if (lo > hi) continue;
      if (hi < 0x80) {
        ascii.set_range(static_cast<std::uint8_t>(lo), static_cast<std::uint8_t>(hi));
        continue;
      }
      std::string a;
      std::string b;
      append_utf8(a, lo);
      append_utf8(b, hi);
      alts.push_back(utf8_between(*this, reinterpret_cast<const std::uint8_t*>(a.data()),
                                  reinterpret_cast<const std::uint8_t*>(b.data()),
                                  static_cast<int>(a.size())));
    }
  }
  if (!ascii.empty()) alts.insert(alts.begin(), bytes(ascii));
  if (alts.empty()) return bytes(ByteSet{});
  return choice(std::move(alts));
}

namespace {

void print_set(std::string& out, const ByteSet& s) {
  auto esc = [&](unsigned b) {
    char buf[8];
    if (b >= 0x21 && b < 0x7F && b != ']' && b != '\\' && b != '-' && b != '^') {
      out += static_cast<char>(b);
    } else {
      std::snprintf(buf, sizeof buf, "\\x%02X", b);
      out += buf;
    }
  };
  if (s.count() == 1) {
    for (unsigned b = 0; b < 256; ++b) {
      if (!s.test(static_cast<std::uint8_t>(b))) continue;
      char buf[8];
      if (b >= 0x20 && b < 0x7F && b != '"' && b != '\\') {
        out += '"';
        out += static_cast<char>(b);
        out += '"';
      } else {
        std::snprintf(buf, sizeof buf, "\"\\x%02X\"", b);
        out += buf;
      }
    }
    return;
  }
  out += '[';
  for (unsigned b = 0; b < 256;) {
    if (!s.test(static_cast<std::uint8_t>(b))) {
      ++b;
      continue;
    }
    unsigned e = b;
    while (e + 1 < 256 && s.test(static_cast<std::uint8_t>(e + 1)))
      ++e;
    esc(b);
    if (e > b) {
      out += '-';
      esc(e);
    }
    b = e + 1;
  }
  out += ']';
}

void print_expr(const Grammar& g, std::string& out, ExprId id, bool nested) {
  const Expr& e = g.expr(id);
  switch (e.kind) {
    case Expr::Kind::kBytes:
      print_set(out, e.bytes);
      return;
    case Expr::Kind::kRule:
      out += g.rule(e.rule).name;
      return;
    case Expr::Kind::kSequence:
    case Expr::Kind::kChoice: {
      if (e.children.empty()) {
        out += "\"\"";
        return;
      }
      if (nested) out += '(';
      for (std::size_t i = 0; i < e.children.size(); ++i) {
        if (i) out += e.kind == Expr::Kind::kChoice ? " | " : " ";
        print_expr(g, out, e.children[i], true);
      }
      if (nested) out += ')';
      return;
    }
    case Expr::Kind::kRepeat:
      print_expr(g, out, e.children[0], true);
      if (e.min == 0 && e.max == kUnbounded) {
        out += '*';
      } else if (e.min == 1 && e.max == kUnbounded) {
        out += '+';
      } else if (e.min == 0 && e.max == 1) {
        out += '?';
      } else {
        out += '{' + std::to_string(e.min);
        if (e.max != e.min) out += ',' + (e.max == kUnbounded ? "" : std::to_string(e.max));
        out += '}';
      }
      return;
  }
}

}  // namespace

std::string Grammar::to_string() const {
  std::string out;
  for (std::size_t i = 0; i < rules_.size(); ++i) {
    out += rules_[i].name + " ::= ";
    if (rules_[i].body) print_expr(*this, out, *rules_[i].body, false);
    out += '\n';
  }
  return out;
}

}  // namespace weft::grammar
