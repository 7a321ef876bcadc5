// The compiler's analysis of a flattened grammar (nullable, productive, FIRST, FOLLOW), solved
// with worklists, checked against the textbook fixpoints (every rule swept until nothing
// changes) on random grammars, and on the long rule chains a bounded repetition makes.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "runtime/grammar/grammar.hpp"
#include "runtime/grammar/grammar_compiler.hpp"

namespace weft::grammar {
namespace {

struct Reference {
  std::vector<bool> nullable, productive;
  std::vector<ByteSet> first, follow;
  std::vector<bool> follow_end;
};

// The sweeps the compiler used before its worklists: slow on chains, obviously right.
Reference sweep(const FlatGrammar& g) {
  const std::size_t n = g.rules.size();
  Reference ref;
  ref.nullable.assign(n, false);
  ref.productive.assign(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t r = 0; r < n; ++r)
      for (const auto& seq : g.rules[r].alts) {
        bool all_nullable = true, all_productive = true;
        for (const auto& e : seq) {
          if (!e.is_rule || !ref.nullable[e.index]) all_nullable = false;
          if (e.is_rule ? !ref.productive[e.index] : g.byte_sets[e.index].empty())
            all_productive = false;
        }
        if (all_nullable && !ref.nullable[r]) ref.nullable[r] = changed = true;
        if (all_productive && !ref.productive[r]) ref.productive[r] = changed = true;
      }
  }
  ref.first.assign(n, ByteSet{});
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t r = 0; r < n; ++r)
      for (const auto& seq : g.rules[r].alts)
        for (const auto& e : seq) {
          const ByteSet before = ref.first[r];
          ref.first[r] |= e.is_rule ? ref.first[e.index] : g.byte_sets[e.index];
          if (!(before == ref.first[r])) changed = true;
          if (!e.is_rule || !ref.nullable[e.index]) break;
        }
  }
  ref.follow.assign(n, ByteSet{});
  ref.follow_end.assign(n, false);
  ref.follow_end[g.root] = true;
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t r = 0; r < n; ++r)
      for (const auto& seq : g.rules[r].alts)
        for (std::size_t i = 0; i < seq.size(); ++i) {
          if (!seq[i].is_rule) continue;
          const std::uint32_t b = seq[i].index;
          ByteSet add;
          bool rest_nullable = true;
          for (std::size_t j = i + 1; j < seq.size() && rest_nullable; ++j) {
            add |= seq[j].is_rule ? ref.first[seq[j].index] : g.byte_sets[seq[j].index];
            rest_nullable = seq[j].is_rule && ref.nullable[seq[j].index];
          }
          if (rest_nullable) {
            add |= ref.follow[r];
            if (ref.follow_end[r] && !ref.follow_end[b]) ref.follow_end[b] = changed = true;
          }
          const ByteSet before = ref.follow[b];
          ref.follow[b] |= add;
          if (!(before == ref.follow[b])) changed = true;
        }
  }
  return ref;
}

// A random expression over `rules` rules: byte sets (now and then empty, so some rules never
// finish), references, sequences, choices and small repetitions.
ExprId random_expr(Grammar& g, std::mt19937& rng, std::size_t rules, int depth) {
  const int kind = depth <= 0 ? static_cast<int>(rng() % 2) : static_cast<int>(rng() % 6);
  switch (kind) {
    case 0: {
      if (rng() % 16 == 0) return g.bytes(ByteSet{});
      const auto lo = static_cast<std::uint8_t>('a' + rng() % 8);
      return g.bytes(ByteSet::range(lo, static_cast<std::uint8_t>(lo + rng() % 3)));
    }
    case 1:
      return g.ref(static_cast<RuleId>(rng() % rules));
    case 2:
    case 3: {
      std::vector<ExprId> items(rng() % 4);
      for (auto& item : items)
        item = random_expr(g, rng, rules, depth - 1);
      return kind == 2 ? g.sequence(std::move(items)) : g.choice(std::move(items));
    }
    default: {
      const auto min = static_cast<std::uint32_t>(rng() % 3);
      const std::uint32_t max = rng() % 4 == 0 ? kUnbounded : min + rng() % 4;
      return g.repeat(random_expr(g, rng, rules, depth - 1), min, max);
    }
  }
}

TEST(GrammarAnalysis, WorklistsEqualTheSweepsOnRandomGrammars) {
  std::mt19937 rng(20261125);
  int compiled = 0, refused = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    Grammar g;
    const std::size_t rules = 1 + rng() % 6;
    for (std::size_t r = 0; r < rules; ++r)
      g.add_rule("r" + std::to_string(r));
    for (std::size_t r = 0; r < rules; ++r)
      g.set_body(static_cast<RuleId>(r), random_expr(g, rng, rules, 3));
    g.set_root(static_cast<RuleId>(rng() % rules));
    auto flat = flatten_grammar(g);
    if (!flat) {
      ++refused;
      continue;
    }
    ++compiled;
    const Reference ref = sweep(*flat);
    for (std::size_t r = 0; r < flat->rules.size(); ++r) {
      SCOPED_TRACE("grammar " + std::to_string(iter) + ", rule " + flat->rules[r].name + "\n" +
                   g.to_string());
      ASSERT_TRUE(ref.productive[r]);
      ASSERT_EQ(flat->nullable[r], ref.nullable[r]);
      ASSERT_EQ(flat->first[r], ref.first[r]);
      ASSERT_EQ(flat->follow[r], ref.follow[r]);
      ASSERT_EQ(flat->follow_end[r], ref.follow_end[r]);
    }
  }
  // Both kinds must be common for the comparison to mean something.
  EXPECT_GT(compiled, 500);
  EXPECT_GT(refused, 100);
}

TEST(GrammarAnalysis, UnproductiveRulesAreNamed) {
  Grammar g;
  RuleId root = g.add_rule("root");
  RuleId loop = g.add_rule("loop");
  g.set_body(root, g.choice({g.literal("x"), g.ref(loop)}));
  g.set_body(loop, g.sequence({g.literal("a"), g.ref(loop)}));  // never ends
  g.set_root(root);
  auto flat = flatten_grammar(g);
  ASSERT_FALSE(flat);
  EXPECT_NE(std::string(flat.error().what()).find("'loop' can never finish"), std::string::npos)
      << flat.error().what();
}

// x{0,4000} y: spelt out, a chain of 4,000 rules, each holding the next, whose FOLLOW comes
// from the outermost copy (the sweeps carried it one rule per pass: 16 million rule visits).
// Since counted repetition (grammars.md, "Bounded repetition") it is one counted element, so
// the grammar stays small; every rule must still see that y may follow it.
TEST(GrammarAnalysis, LongRepetitionChains) {
  Grammar g;
  RuleId root = g.add_rule("root");
  g.set_body(root, g.sequence({g.repeat(g.literal("x"), 0, 4000), g.literal("y")}));
  g.set_root(root);
  auto flat = flatten_grammar(g);
  ASSERT_TRUE(flat) << flat.error().what();
  ASSERT_LT(flat->rules.size(), 16u) << "x{0,4000} is one counted element, not a chain";
  // (The sweeps above know nothing of counted elements, so they are no reference here: the
  // counted x may be followed by another x as well as by y.)
  for (std::size_t r = 1; r < flat->rules.size(); ++r) {
    ASSERT_TRUE(flat->follow[r].test('y')) << flat->rules[r].name;
    ASSERT_FALSE(flat->follow_end[r]) << flat->rules[r].name;
  }
}

}  // namespace
}  // namespace weft::grammar
