// Repetitions of regex items that may match nothing (`(){120}`, `(a?){4000}`, nested bounds):
// the front end rewrites them so that the repeated item always consumes a byte, which makes
// every large bound one counted element (docs/grammars.md, "Regular expressions"). tests/fuzz
// found patterns of 10 to 340 bytes that compiled for 3 to 8 CPU seconds under ASan before
// (tests/fixtures/fuzz_findings/regex/); they must now compile small or be refused.

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include "runtime/grammar/constraint_compiler.hpp"
#include "runtime/grammar/regex_to_grammar.hpp"
#include "tests/runtime/grammar/grammar_test_util.hpp"

namespace weft::grammar {
namespace {

namespace fs = std::filesystem;
using testing::matches;

std::size_t flat_rules(const Grammar& g) {
  auto flat = flatten_grammar(g);
  EXPECT_TRUE(flat.ok()) << flat.error().what();
  return flat.ok() ? flat->rules.size() : 0;
}

std::size_t flat_elements(const FlatGrammar& flat) {
  std::size_t n = 0;
  for (const auto& r : flat.rules)
    for (const auto& a : r.alts)
      n += a.size() + 1;
  return n;
}

TEST(RegexRepetition, EmptyGroupsCollapse) {
  for (const char* re : {"(){1,3010}", "(){1,3411}", "(){120}", "(()){5}x", "(?:(){9}|()){7}x",
                         "((){0,100000}){100000}x"}) {
    auto g = regex_to_grammar(re);
    ASSERT_TRUE(g.ok()) << re << ": " << g.error().what();
    EXPECT_LT(flat_rules(*g), 8u) << re;
  }
  auto g = regex_to_grammar("(){3}x(){0}");
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(matches(*g, "x"));
  EXPECT_FALSE(matches(*g, ""));
  EXPECT_FALSE(matches(*g, "xx"));
}

TEST(RegexRepetition, ItemsThatMayBeEmptyAreCounted) {
  // (a?){4000} is a{0,4000}: one counted element, not a chain of 4000 optional copies.
  auto g = regex_to_grammar("(a?){4000}b");
  ASSERT_TRUE(g.ok()) << g.error().what();
  EXPECT_LT(flat_rules(*g), 10u);
  EXPECT_TRUE(matches(*g, "b"));
  EXPECT_TRUE(matches(*g, std::string(4000, 'a') + "b"));
  EXPECT_FALSE(matches(*g, std::string(4001, 'a') + "b"));
  // (a?b?){1,3000}: up to 3000 non-empty copies of (ab?|b).
  auto h = regex_to_grammar("(a?b?){1,3000}");
  ASSERT_TRUE(h.ok()) << h.error().what();
  EXPECT_LT(flat_rules(*h), 20u);
  EXPECT_TRUE(matches(*h, ""));
  // (Long runs of "ab" are ambiguous, one copy or two each, so the matcher would follow a
  // stack per possible count: kept short here.)
  EXPECT_TRUE(matches(*h, "abbaab"));
  EXPECT_TRUE(matches(*h, std::string(3000, 'a')));
  EXPECT_FALSE(matches(*h, std::string(3001, 'a')));
  EXPECT_TRUE(matches(*h, std::string(3000, 'b')));
  EXPECT_FALSE(matches(*h, std::string(3001, 'b')));
}

TEST(RegexRepetition, NestedBoundsMultiplyAndAreChecked) {
  auto g = regex_to_grammar("((a?){100}){100}c");
  ASSERT_TRUE(g.ok()) << g.error().what();
  EXPECT_LT(flat_rules(*g), 10u);
  EXPECT_TRUE(matches(*g, std::string(10000, 'a') + "c"));
  EXPECT_FALSE(matches(*g, std::string(10001, 'a') + "c"));
  // Past the limit, the error names the repetition, its offset and the product.
  auto big = regex_to_grammar("x((a?){400}){400}");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(std::string(big.error().what())
                .find("regex at offset 12: repetition {400,400} of a group repeated up to 400 "
                      "times expands to 160000 copies, above the limit of 100000"),
            std::string::npos)
      << big.error().what();
  auto count = regex_to_grammar("a{100001}");
  ASSERT_FALSE(count.ok());
  EXPECT_NE(std::string(count.error().what()).find("repetition count above the limit of 100000"),
            std::string::npos)
      << count.error().what();
  // Unbounded stays unbounded.
  auto star = regex_to_grammar("((a?){3})*b");
  ASSERT_TRUE(star.ok());
  EXPECT_TRUE(matches(*star, std::string(50, 'a') + "b"));
}

// The rewrite keeps the language: random patterns over {a, b} with empty groups, optional,
// counted and starred items, each checked on every string of up to 7 letters against a
// reference that follows the pattern's tree directly (the set of positions each part can end
// at; std::regex backtracks exponentially on such patterns).
struct Node {
  enum Kind { kChar, kEmpty, kSeq, kAlt, kRepeat } kind = kEmpty;
  char c = 0;
  unsigned lo = 0, hi = 0;  // kRepeat; hi = ~0u: unbounded
  std::vector<Node> kids;
};

// Bit i of the result: the part can end at position i, having started at a position of `from`.
std::uint32_t ends(const Node& n, const std::string& s, std::uint32_t from) {
  switch (n.kind) {
    case Node::kChar: {
      std::uint32_t out = 0;
      for (std::size_t i = 0; i < s.size(); ++i)
        if ((from >> i & 1) && s[i] == n.c) out |= 1u << (i + 1);
      return out;
    }
    case Node::kEmpty:
      return from;
    case Node::kSeq:
      for (const Node& k : n.kids)
        from = ends(k, s, from);
      return from;
    case Node::kAlt:
      return ends(n.kids[0], s, from) | ends(n.kids[1], s, from);
    case Node::kRepeat: {
      std::uint32_t cur = from;
      for (unsigned i = 0; i < n.lo; ++i)
        cur = ends(n.kids[0], s, cur);
      std::uint32_t all = cur;
      for (unsigned i = n.lo; i < n.hi; ++i) {
        cur = ends(n.kids[0], s, cur);
        if ((all | cur) == all) break;  // nothing new: the rest adds nothing either
        all |= cur;
      }
      return all;
    }
  }
  return 0;
}

TEST(RegexRepetition, SameLanguageAsTheTree) {
  std::mt19937 rng(2026);
  std::function<std::pair<std::string, Node>(int)> gen =
      [&](int depth) -> std::pair<std::string, Node> {
    Node n;
    switch (depth > 3 ? rng() % 3 : rng() % 8) {
      case 0:
        n.kind = Node::kChar, n.c = 'a';
        return {"a", n};
      case 1:
        n.kind = Node::kChar, n.c = 'b';
        return {"b", n};
      case 2:
        return {"()", n};
      case 3: {
        auto x = gen(depth + 1), y = gen(depth + 1);
        n.kind = Node::kSeq, n.kids = {x.second, y.second};
        return {"(" + x.first + y.first + ")", n};
      }
      case 4: {
        auto x = gen(depth + 1), y = gen(depth + 1);
        n.kind = Node::kAlt, n.kids = {x.second, y.second};
        return {"(" + x.first + "|" + y.first + ")", n};
      }
      default: {
        auto x = gen(depth + 1);
        n.kind = Node::kRepeat, n.kids = {x.second};
        const int form = static_cast<int>(rng() % 4);
        if (form == 0) {
          n.lo = 0, n.hi = 1;
          return {"(" + x.first + ")?", n};
        }
        if (form == 1) {
          n.lo = 0, n.hi = ~0u;
          return {"(" + x.first + ")*", n};
        }
        n.lo = rng() % 3, n.hi = n.lo + rng() % 3;
        if (form == 3) n.lo = n.hi = 40 + rng() % 3;  // counted when the item consumes
        return {"(" + x.first + "){" + std::to_string(n.lo) + "," + std::to_string(n.hi) + "}", n};
      }
    }
  };
  std::vector<std::string> strings{""};
  for (std::size_t i = 0; i < strings.size() && strings[i].size() < 7; ++i) {
    strings.push_back(strings[i] + "a");
    strings.push_back(strings[i] + "b");
  }
  int checked = 0;
  for (int round = 0; round < 1000; ++round) {
    auto [x, xn] = gen(0);
    auto [y, yn] = gen(1);
    const std::string re = x + y;
    Node tree;
    tree.kind = Node::kSeq;
    tree.kids = {xn, yn};
    auto g = regex_to_grammar(re);
    ASSERT_TRUE(g.ok()) << re << ": " << g.error().what();
    auto flat = flatten_grammar(*g);
    ASSERT_TRUE(flat.ok()) << re << ": " << flat.error().what();
    for (const std::string& s : strings) {
      const bool want = ends(tree, s, 1u) >> s.size() & 1;
      ASSERT_EQ(matches(*flat, s), want) << "/" << re << "/ on '" << s << "'";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 1000 * 255);
}

// Every input tests/fuzz found slow (libFuzzer's `timeout-*` over 10 s, `slow-unit-*` over 5 s,
// under ASan; 2026-11-26), through the fuzz target's path: grammar_for, then flatten_grammar.
// Each is refused or compiles to a grammar a few times the size of the pattern (before, the
// chains of empty-group copies made thousands of rules and the analysis swept them
// quadratically).
TEST(RegexRepetition, FuzzFindingsCompileSmallOrAreRefused) {
  const fs::path dir = fs::path(WEFT_SOURCE_DIR) / "tests/fixtures/fuzz_findings/regex";
  int files = 0, compiled = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream buf;
    buf << in.rdbuf();
    const std::string pattern = buf.str();
    ++files;
    SCOPED_TRACE(entry.path().filename().string());
    for (bool flexible : {false, true}) {
      ResponseFormat format;
      format.type = ResponseFormat::Type::kRegex;
      format.source = pattern;
      format.flexible_whitespace = flexible;
      auto g = grammar_for(format);
      if (!g) continue;
      EXPECT_LT(g->expr_count(), 40 * pattern.size());
      auto flat = flatten_grammar(*g);
      if (!flat) continue;
      ++compiled;
      EXPECT_LT(flat->rules.size(), 4 * pattern.size());
      EXPECT_LT(flat_elements(*flat), 40 * pattern.size());
    }
  }
  EXPECT_EQ(files, 18);
  EXPECT_GT(compiled, 0);
}

}  // namespace
}  // namespace weft::grammar
