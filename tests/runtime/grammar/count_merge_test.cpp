// Merged counts (Frame::count_span, Pushdown::emit): an ambiguous counted repetition keeps a
// handful of stacks instead of one per count, and accepts exactly what it did before the
// merge. Every string over a small alphabet up to a length is run through the pushdown with
// merging and without it (Pushdown::set_merge_counts(false), one stack per count as before)
// and checked against a reference (std::regex, or a hand-written checker for JSON): the two
// agree on every prefix, alive or not and matched or not. Small bounds are made counted
// elements (CompileLimits::counted_above = 1) so the counted path is what runs.
// Also the bound on live stacks (kMaxLiveStacks): an exponentially ambiguous grammar is
// refused with an error naming the limit, never left to slow down with every byte.

#include <chrono>
#include <functional>
#include <regex>

#include "runtime/grammar/ebnf_parser.hpp"
#include "runtime/grammar/grammar_matcher.hpp"
#include "runtime/grammar/json_schema_to_grammar.hpp"
#include "runtime/grammar/regex_to_grammar.hpp"
#include "runtime/grammar/token_constraint.hpp"
#include "tests/runtime/grammar/grammar_test_util.hpp"

namespace weft::grammar {
namespace {

using namespace testing;

CompileLimits counted_always() {
  CompileLimits limits;
  limits.counted_above = 1;
  return limits;
}

bool has_counted(const FlatGrammar& flat) {
  for (const auto& rule : flat.rules)
    for (const auto& seq : rule.alts)
      for (const auto& e : seq)
        if (e.counted()) return true;
  return false;
}

// Walks every string over `alphabet` of at most `max_len` bytes after `prefix`, stepping the
// merged and the unmerged pushdown side by side, and calls `check(text, merged, unmerged)` on
// each (after `suffix` is stepped too, when one is given). Returns the most stacks the merged
// and the unmerged sets held.
struct Peak {
  std::size_t merged = 0, unmerged = 0;
};
Peak walk_all(
    const FlatGrammar& flat, std::string_view alphabet, std::size_t max_len,
    std::string_view prefix, std::string_view suffix,
    const std::function<void(const std::string&, const StackSet&, const StackSet&)>& check) {
  StackArena arena;
  Pushdown merged(flat, arena), unmerged(flat, arena);
  unmerged.set_merge_counts(false);
  const std::size_t depth = prefix.size() + max_len + suffix.size() + 2;
  std::vector<StackSet> ms(depth), us(depth);
  merged.start(ms[0]);
  unmerged.start(us[0]);
  std::size_t d = 0;
  for (char c : prefix) {
    merged.step(ms[d], static_cast<std::uint8_t>(c), ms[d + 1]);
    unmerged.step(us[d], static_cast<std::uint8_t>(c), us[d + 1]);
    ++d;
  }
  Peak peak;
  StackSet mt, ut, scratch_m, scratch_u;
  std::string text;
  std::function<void(std::size_t)> visit = [&](std::size_t at) {
    peak.merged = std::max(peak.merged, ms[at].cursors.size());
    peak.unmerged = std::max(peak.unmerged, us[at].cursors.size());
    const StackSet* m = &ms[at];
    const StackSet* u = &us[at];
    if (!suffix.empty()) {
      mt = ms[at];
      ut = us[at];
      for (char c : suffix) {
        merged.step(mt, static_cast<std::uint8_t>(c), scratch_m);
        unmerged.step(ut, static_cast<std::uint8_t>(c), scratch_u);
        std::swap(mt, scratch_m);
        std::swap(ut, scratch_u);
      }
      m = &mt;
      u = &ut;
    }
    check(text, *m, *u);
    if (text.size() == max_len || (ms[at].empty() && us[at].empty())) return;
    for (char c : alphabet) {
      merged.step(ms[at], static_cast<std::uint8_t>(c), ms[at + 1]);
      unmerged.step(us[at], static_cast<std::uint8_t>(c), us[at + 1]);
      text.push_back(c);
      visit(at + 1);
      text.pop_back();
    }
  };
  visit(d);
  return peak;
}

// Patterns std::regex reads the same way: ambiguous alternatives, optional parts that the
// rewrite folds into the repeated item, lower bounds above zero, unbounded ones, and counted
// repetitions nested in counted repetitions or side by side.
const char* kPatterns[] = {
    "(a|ab|b){0,5}",         "(a?b?){1,4}",
    "(a|ab|b){2,5}",         "(ab|a|b|ba){3,6}",
    "(a|aa|aaa){2,7}b?",     "(a|aab|b){1,9}",
    "(a|ab|b){4,}",          "(a|aa){0,3}(a|ab){2,4}b",
    "((a|ab){1,3}b?){2,4}",  "((a|b){0,3}(ab|ba)){1,3}",
    "(a{1,3}|b){2,6}",       "((a|ab|b){2,3}){2,3}",
    "(b(a|ab|b){0,4}){1,3}",
};

TEST(CountMerge, AmbiguousRepetitionsAcceptWhatTheyDidBefore) {
  for (const char* pattern : kPatterns) {
    SCOPED_TRACE(pattern);
    auto g = regex_to_grammar(pattern);
    ASSERT_TRUE(g.ok()) << g.error().what();
    auto flat = flatten_grammar(*g, counted_always());
    ASSERT_TRUE(flat.ok()) << flat.error().what();
    ASSERT_TRUE(has_counted(*flat));
    const std::regex reference(pattern);
    std::size_t accepted = 0;
    auto peak = walk_all(*flat, "ab", 12, "", "",
                         [&](const std::string& text, const StackSet& m, const StackSet& u) {
                           ASSERT_EQ(m.empty(), u.empty()) << "'" << text << "'";
                           ASSERT_EQ(m.accepted, u.accepted) << "'" << text << "'";
                           ASSERT_EQ(m.accepted, std::regex_match(text, reference))
                               << "'" << text << "'";
                           accepted += m.accepted;
                         });
    EXPECT_GT(accepted, 0u);
    EXPECT_LE(peak.merged, peak.unmerged);
  }
}

// Random patterns with small bounds, nested and side by side: counted and merged, counted
// with one stack per count, and spelt out (CompileLimits::counted_above = 0: no counted
// element at all) agree on every string over {a, b} of up to 9 bytes, alive and matched.
std::string random_pattern(std::mt19937& rng, int depth) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  std::string out;
  const int alts = 1 + pick(depth == 0 ? 2 : 3);
  for (int a = 0; a < alts; ++a) {
    if (a) out += '|';
    const int items = 1 + pick(depth == 0 ? 3 : 2);
    for (int i = 0; i < items; ++i) {
      const int kind = pick(depth < 2 ? 4 : 2);
      if (kind < 2) {
        out += kind ? 'b' : 'a';
      } else {
        out += '(';
        out += random_pattern(rng, depth + 1);
        out += ')';
      }
      const int quantifier = pick(6);
      switch (quantifier) {
        case 0:
          out += '?';
          break;
        case 1:    // {m,n}
        case 2: {  // {m} or {m,}
          const int m = pick(3);
          out.push_back('{');
          out.append(std::to_string(m));
          if (quantifier == 1 || pick(2)) out.push_back(',');
          if (quantifier == 1) out.append(std::to_string(m + 1 + pick(4)));
          out.push_back('}');
          break;
        }
        case 3:
          out += pick(2) ? '*' : '+';
          break;
        default:
          break;
      }
    }
  }
  return out;
}

TEST(CountMerge, RandomPatternsAgreeWithOnePerCountAndSpeltOut) {
  std::mt19937 rng(2026);
  int checked = 0, with_counted = 0;
  for (int n = 0; n < 250; ++n) {
    const std::string pattern = random_pattern(rng, 0);
    SCOPED_TRACE(pattern);
    auto g = regex_to_grammar(pattern);
    if (!g) continue;  // a refused nesting (docs/grammars.md): not what this tests
    CompileLimits spell;
    spell.counted_above = 0;
    auto counted = flatten_grammar(*g, counted_always());
    auto spelt = flatten_grammar(*g, spell);
    ASSERT_TRUE(counted.ok()) << counted.error().what();
    ASSERT_TRUE(spelt.ok()) << spelt.error().what();
    ++checked;
    with_counted += has_counted(*counted);
    StackArena arena, spelt_arena;
    Pushdown merged(*counted, arena), unmerged(*counted, arena), plain(*spelt, spelt_arena);
    unmerged.set_merge_counts(false);
    constexpr std::size_t kMaxLen = 9;
    std::vector<StackSet> ms(kMaxLen + 1), us(kMaxLen + 1), ps(kMaxLen + 1);
    merged.start(ms[0]);
    unmerged.start(us[0]);
    plain.start(ps[0]);
    std::string text;
    std::function<void(std::size_t)> visit = [&](std::size_t d) {
      ASSERT_EQ(ms[d].empty(), us[d].empty()) << "'" << text << "'";
      ASSERT_EQ(ms[d].empty(), ps[d].empty()) << "'" << text << "'";
      ASSERT_EQ(ms[d].accepted, us[d].accepted) << "'" << text << "'";
      ASSERT_EQ(ms[d].accepted, ps[d].accepted) << "'" << text << "'";
      ASSERT_LE(ms[d].cursors.size(), us[d].cursors.size()) << "'" << text << "'";
      if (d == kMaxLen || ps[d].empty()) return;
      for (char c : {'a', 'b'}) {
        merged.step(ms[d], static_cast<std::uint8_t>(c), ms[d + 1]);
        unmerged.step(us[d], static_cast<std::uint8_t>(c), us[d + 1]);
        plain.step(ps[d], static_cast<std::uint8_t>(c), ps[d + 1]);
        text.push_back(c);
        visit(d + 1);
        text.pop_back();
        if (HasFatalFailure()) return;
      }
    };
    visit(0);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(checked, 200);
  EXPECT_GT(with_counted, 100);
}

// The same with the repetition's bounds large enough to be counted by default, over the
// documented case: the merged sets stay a few stacks all the way, the unmerged ones grow with
// the text.
TEST(CountMerge, StacksStaySmallWhereOnePerCountGrows) {
  const std::pair<const char*, const char*> cases[] = {
      {"(a|ab|b){0,3000}", "ab"}, {"(a?b?){1,3000}", "ab"}, {"(a|aa|aaa){40,3000}", "a"}};
  for (auto [pattern, unit] : cases) {
    SCOPED_TRACE(pattern);
    auto g = regex_to_grammar(pattern);
    ASSERT_TRUE(g.ok()) << g.error().what();
    auto flat = flatten_grammar(*g);
    ASSERT_TRUE(flat.ok()) << flat.error().what();
    ASSERT_TRUE(has_counted(*flat));
    StackArena arena;
    Pushdown merged(*flat, arena), unmerged(*flat, arena);
    unmerged.set_merge_counts(false);
    StackSet m, u, next;
    merged.start(m);
    unmerged.start(u);
    std::size_t peak_m = 0, peak_u = 0;
    for (int i = 0; i < 120; ++i)
      for (const char* c = unit; *c != 0; ++c) {
        merged.step(m, static_cast<std::uint8_t>(*c), next);
        std::swap(m, next);
        unmerged.step(u, static_cast<std::uint8_t>(*c), next);
        std::swap(u, next);
        ASSERT_EQ(m.accepted, u.accepted);
        ASSERT_FALSE(m.empty());
        peak_m = std::max(peak_m, m.cursors.size());
        peak_u = std::max(peak_u, u.cursors.size());
      }
    EXPECT_LE(peak_m, 6u);
    EXPECT_GE(peak_u, 60u);
  }
}

// Counted repetitions inside a JSON document: array sizes (minItems/maxItems) around strings
// whose pattern is itself an ambiguous counted repetition. The reference parses the array.
TEST(CountMerge, JsonArraysOfAmbiguousStringsAcceptWhatTheyDidBefore) {
  const std::regex item("(a|ab|b){1,4}");
  for (
      const char* schema :
      {R"({"type":"array","items":{"type":"string","pattern":"^(a|ab|b){1,4}$"},"minItems":2,"maxItems":3})",
       R"({"type":"array","items":{"type":"string","pattern":"^(a|ab|b){1,4}$"},"maxItems":4})"}) {
    SCOPED_TRACE(schema);
    const bool at_least_two = std::string_view(schema).find("minItems") != std::string_view::npos;
    const std::size_t most = at_least_two ? 3 : 4;
    auto g = json_schema_to_grammar(schema);
    ASSERT_TRUE(g.ok()) << g.error().what();
    auto flat = flatten_grammar(*g, counted_always());
    ASSERT_TRUE(flat.ok()) << flat.error().what();
    ASSERT_TRUE(has_counted(*flat));
    // "[" + text + "]" is accepted iff text is "s1","s2",... with each s matching the item
    // pattern and the count within the bounds.
    auto valid = [&](const std::string& text) {
      if (text.empty()) return !at_least_two;
      std::size_t items = 0, i = 0;
      for (;;) {
        if (i >= text.size() || text[i] != '"') return false;
        const std::size_t end = text.find('"', i + 1);
        if (end == std::string::npos) return false;
        if (!std::regex_match(text.substr(i + 1, end - i - 1), item)) return false;
        ++items;
        i = end + 1;
        if (i == text.size()) break;
        if (text[i] != ',') return false;
        ++i;
      }
      return items <= most && (!at_least_two || items >= 2);
    };
    std::size_t accepted = 0;
    walk_all(*flat, "ab\",", 10, "[", "]",
             [&](const std::string& text, const StackSet& m, const StackSet& u) {
               ASSERT_EQ(m.empty(), u.empty()) << "'" << text << "'";
               ASSERT_EQ(m.accepted, u.accepted) << "'" << text << "'";
               ASSERT_EQ(m.accepted, valid(text)) << "'[" << text << "]'";
               accepted += m.accepted;
             });
    EXPECT_GT(accepted, 100u);
  }
}

// Masks over merged stacks (whose counts may span several of the precomputed count buckets)
// equal brute force along random walks, with tokens long enough to cross the bounds.
TEST(CountMerge, MasksOverMergedCountsEqualBruteForce) {
  auto vocab = byte_vocab({"ab", "ba", "aab", "abab", "bb", "aaaa", "abababab", "bab", "bc", "abc",
                           "\",\"", "\"]", "[\"ab"});
  auto trie = TokenTrie::build(vocab);
  ASSERT_TRUE(trie.ok());
  std::mt19937 rng(11);
  // Regexes, and JSON schemas (a string's pattern, an array of them with minItems/maxItems).
  for (
      const char* pattern :
      {"(a|ab|b){3,40}c", "x(a?b?){0,50}y?", "((a|ab|b){2,40}c){1,40}",
       "(a|ab|b){0,35}(ab|b){34,40}", R"({"type":"string","pattern":"^(a|ab|b){3,40}$"})",
       R"({"type":"array","items":{"type":"string","pattern":"^(a?b?){1,36}$"},"minItems":2,"maxItems":40})"}) {
    SCOPED_TRACE(pattern);
    auto g = pattern[0] == '{' ? json_schema_to_grammar(pattern) : regex_to_grammar(pattern);
    ASSERT_TRUE(g.ok()) << g.error().what();
    auto cg = CompiledGrammar::compile(*g, *trie);
    ASSERT_TRUE(cg.ok()) << cg.error().what();
    ASSERT_TRUE(has_counted((*cg)->flat()));
    for (int walk = 0; walk < 4; ++walk) {
      GrammarMatcher m(*cg, 2);
      std::string text;
      for (int step = 0; step < 70 && !m.is_terminated(); ++step) {
        auto fast = fast_mask(m);
        ASSERT_TRUE(same_mask(fast, brute_mask(m, vocab.tokens.size()), vocab))
            << "after '" << text << "'";
        std::vector<std::int32_t> allowed;
        for (std::size_t t = 0; t < vocab.tokens.size(); ++t)
          if (fast[t / 32] >> (t % 32) & 1) allowed.push_back(static_cast<std::int32_t>(t));
        ASSERT_FALSE(allowed.empty()) << "after '" << text << "'";
        // Mostly long tokens, and no ending ('c', 'y', the end of sequence) in the first 50
        // steps, so the walks reach the bounds.
        std::vector<std::int32_t> going_on;
        for (std::int32_t t : allowed)
          if (!vocab.special[t] && vocab.tokens[t].find_first_of("cy") == std::string::npos)
            going_on.push_back(t);
        const auto& pool = step < 50 && !going_on.empty() ? going_on : allowed;
        std::int32_t next =
            pool[std::uniform_int_distribution<std::size_t>(0, pool.size() - 1)(rng)];
        for (std::int32_t t : pool)
          if (rng() % 3 && vocab.tokens[t].size() >= 3 && !vocab.special[t]) next = t;
        ASSERT_TRUE(m.accept_token(next));
        if (!m.is_terminated()) text += vocab.tokens[next];
        EXPECT_LE(m.stack_count(), 16u) << "after '" << text << "'";
      }
    }
  }
}

// docs/reliability.md: 6,000 bytes of "abab..." against (a|ab|b){0,3000} took 317 s; merged,
// a few milliseconds. Bounded generously for slow machines and sanitizers.
TEST(CountMerge, DocumentedCaseIsFast) {
  auto vocab = byte_vocab();
  auto trie = TokenTrie::build(vocab);
  ASSERT_TRUE(trie.ok());
  std::string text;
  for (int i = 0; i < 3000; ++i)
    text += "ab";
  for (const char* pattern : {"(a|ab|b){0,3000}", "(a?b?){1,3000}"}) {
    auto g = regex_to_grammar(pattern);
    ASSERT_TRUE(g.ok()) << g.error().what();
    auto cg = CompiledGrammar::compile(*g, *trie);
    ASSERT_TRUE(cg.ok()) << cg.error().what();
    const auto start = std::chrono::steady_clock::now();
    GrammarMatcher m(*cg);
    ASSERT_TRUE(m.accept_bytes(text)) << pattern;
    EXPECT_TRUE(m.can_terminate()) << pattern;
    EXPECT_FALSE(m.accept_bytes("a")) << pattern;  // 3,001 copies at least
    GrammarMatcher each(*cg, 0);
    for (char c : text) {
      auto mask = fast_mask(each);
      ASSERT_TRUE(mask[static_cast<std::uint8_t>(c) / 32] >> (c % 32) & 1);
      ASSERT_TRUE(each.accept_bytes(std::string_view(&c, 1)));
      ASSERT_LE(each.stack_count(), 6u);
    }
    EXPECT_TRUE(each.can_terminate());
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20)) << pattern;
  }
}

// An exponentially ambiguous grammar: after n bytes of 'a', 3 * 2^n stacks (each 'a' opens an
// x that may close with "b" or "c", and the next x may start with any of its 3 alternatives).
// Nothing merges them; the matcher refuses the output once they pass kMaxLiveStacks
// (3 * 2^12 > 10,000 > 3 * 2^11), with an error naming the limit, and stays refused.
Grammar exponential() {
  auto g = parse_ebnf("root ::= x\nx ::= \"a\" x \"b\" | \"a\" x \"c\" | \"d\"");
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().what());
  return g.ok() ? std::move(*g) : Grammar{};
}

TEST(CountMerge, TooManyStacksRefuseTheOutputNamingTheLimit) {
  static_assert(kMaxLiveStacks >= 3u << 11 && kMaxLiveStacks < 3u << 12);
  auto vocab = byte_vocab();
  auto trie = TokenTrie::build(vocab);
  ASSERT_TRUE(trie.ok());
  auto cg = CompiledGrammar::compile(exponential(), *trie);
  ASSERT_TRUE(cg.ok()) << cg.error().what();
  GrammarMatcher m(*cg);
  ASSERT_TRUE(m.accept_bytes(std::string(11, 'a')));
  EXPECT_EQ(m.stack_count(), 3u << 11);
  EXPECT_EQ(m.error(), nullptr);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(m.accept_bytes("a"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  ASSERT_NE(m.error(), nullptr);
  const std::string message = m.error()->what();
  EXPECT_NE(message.find("10000"), std::string::npos) << message;
  EXPECT_NE(message.find("live stacks"), std::string::npos) << message;
  EXPECT_NE(message.find("byte 12 "), std::string::npos) << message;
  // Refused from then on: the mask allows only the end of sequence, which is refused too.
  auto mask = fast_mask(m);
  for (std::size_t t = 0; t < vocab.tokens.size(); ++t)
    EXPECT_EQ(mask[t / 32] >> (t % 32) & 1,
              t == static_cast<std::size_t>(vocab.eos_ids[0]) ? 1u : 0u)
        << t;
  EXPECT_FALSE(m.accept_token(vocab.eos_ids[0]));
  EXPECT_FALSE(m.accept_bytes("d"));
  EXPECT_TRUE(m.find_jump_forward_string().empty());
  ASSERT_TRUE(m.rollback(1).ok());
  EXPECT_NE(m.error(), nullptr);
  EXPECT_FALSE(m.accept_bytes("d"));
}

// A long token crosses the limit while the mask is computed: the output is refused there, and
// the constraint reports the error when the next token comes.
TEST(CountMerge, TooManyStacksInAMaskRefuseTheOutput) {
  auto vocab = byte_vocab({std::string(16, 'a')});
  auto trie = TokenTrie::build(vocab);
  ASSERT_TRUE(trie.ok());
  auto cg = CompiledGrammar::compile(exponential(), *trie);
  ASSERT_TRUE(cg.ok()) << cg.error().what();
  TokenConstraint c(*cg, static_cast<int>(vocab.tokens.size()));
  const auto start = std::chrono::steady_clock::now();
  const auto& mask = c.next_mask();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  const auto eos = static_cast<std::size_t>(vocab.eos_ids[0]);
  EXPECT_EQ(mask[eos / 32] >> (eos % 32) & 1, 1u);
  EXPECT_EQ(mask['a' / 32] >> ('a' % 32) & 1, 0u);
  EXPECT_EQ(c.accept(vocab.eos_ids[0]), TokenConstraint::Verdict::kRejected);
  ASSERT_NE(c.error(), nullptr);
  EXPECT_NE(std::string(c.error()->what()).find("10000"), std::string::npos);
  // Without the long token the same grammar runs while it stays under the limit.
  auto small = TokenTrie::build(byte_vocab());
  ASSERT_TRUE(small.ok());
  auto cg2 = CompiledGrammar::compile(exponential(), *small);
  ASSERT_TRUE(cg2.ok());
  TokenConstraint ok(*cg2, 258);
  for (int i = 0; i < 5; ++i)
    ASSERT_EQ(ok.accept('a'), TokenConstraint::Verdict::kContinue);
  EXPECT_EQ(ok.accept('d'), TokenConstraint::Verdict::kContinue);
  EXPECT_EQ(ok.error(), nullptr);
}

}  // namespace
}  // namespace weft::grammar
