#include "runtime/grammar/grammar_matcher.hpp"

#include "runtime/grammar/ebnf_parser.hpp"
#include "runtime/grammar/json_schema_to_grammar.hpp"
#include "tests/runtime/grammar/grammar_test_util.hpp"

namespace weft::grammar {
namespace {

using namespace testing;

std::shared_ptr<const CompiledGrammar> compile(const Grammar& g,
                                               const std::shared_ptr<const TokenTrie>& trie) {
  auto cg = CompiledGrammar::compile(g, trie);
  EXPECT_TRUE(cg.ok()) << (cg.ok() ? "" : cg.error().what());
  return cg.ok() ? *cg : nullptr;
}

Grammar from_schema(std::string_view s) {
  auto g = json_schema_to_grammar(s);
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().what());
  return g.ok() ? std::move(*g) : Grammar{};
}
Grammar from_ebnf(std::string_view s) {
  auto g = parse_ebnf(s);
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().what());
  return g.ok() ? std::move(*g) : Grammar{};
}

const char* kSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array","items":{"enum":["a","bc","\"q\""]},"maxItems":3}},"required":["name"]})",
    R"({"$defs":{"t":{"type":"object","properties":{"v":{"type":"number"},"kids":{"type":"array","items":{"$ref":"#/$defs/t"}}},"required":["v"]}},"$ref":"#/$defs/t"})",
    R"({"type":"object","properties":{"d":{"type":"string","format":"date"},"p":{"type":"string","pattern":"^[a-z]+\\d?$"},"s":{"type":"string","maxLength":4}},"additionalProperties":{"type":"boolean"}})",
    R"({"anyOf":[{"type":"array","prefixItems":[{"type":"boolean"},{"type":"null"}]},{"type":"string","format":"uuid"},{"type":"integer","exclusiveMinimum":-20}]})",
    // Bounded repetitions of a rule (a string character, an enum) inlined into each copy.
    R"({"type":"object","properties":{"s":{"type":"string","minLength":2,"maxLength":9},"t":{"type":"array","items":{"enum":["a","bc",null]},"maxItems":5}},"required":["s","t"]})",
};
const char* kEbnf[] = {
    "root ::= expr\nexpr ::= term ((\"+\" | \"-\") term)*\nterm ::= [0-9]+ | \"(\" expr \")\"",
    "root ::= (\"ab\" | \"a\" \"b\" | \"abc\")* \"!\"",  // ambiguous on purpose
    "root ::= \"x\"{2,5} [\\u00e0-\\u00ff]? \"\\xFF\"?",
    "root ::= \"[\" item{0,6} \"]\"\nitem ::= \"ab\" | [0-9] | \"\\u00e9\" | \"(\" item{1,3} \")\"",
};

// Walks random valid paths: at each step the fast mask must equal the brute-force one; then a
// random allowed token is accepted.
void check_random_walks(const Grammar& g, std::uint32_t seed, int walks, int steps) {
  std::mt19937 rng(seed);
  auto vocab = random_vocab(rng, 400, "{}[]\":,0123456789-.eEabcdqtrunlsfxyz+()! \\\xC3\xA9", 5);
  auto trie = TokenTrie::build(vocab);
  ASSERT_TRUE(trie.ok());
  auto cg = compile(g, *trie);
  ASSERT_TRUE(cg);
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(cg, 64);
    for (int s = 0; s < steps && !m.is_terminated(); ++s) {
      auto fast = fast_mask(m);
      auto brute = brute_mask(m, vocab.tokens.size());
      ASSERT_TRUE(same_mask(fast, brute, vocab)) << "walk " << w << " step " << s;
      std::vector<std::int32_t> allowed;
      for (std::size_t t = 0; t < vocab.tokens.size(); ++t)
        if (brute[t / 32] >> (t % 32) & 1) allowed.push_back(static_cast<std::int32_t>(t));
      ASSERT_FALSE(allowed.empty())
          << "no token allowed at step " << s << ": the grammar reached a dead end";
      // Prefer not to end early so walks go deep.
      std::int32_t t = allowed[rng() % allowed.size()];
      if (vocab.special[t] && allowed.size() > 1 && s < steps / 2)
        t = allowed[(rng() % (allowed.size() - 1))];
      ASSERT_TRUE(m.accept_token(t));
    }
  }
}

TEST(GrammarMatcher, MasksEqualBruteForceOnJsonSchemas) {
  std::uint32_t seed = 1;
  for (const char* s : kSchemas)
    check_random_walks(from_schema(s), seed++, 6, 40);
  check_random_walks(json_object_grammar(), 99, 6, 40);
  JsonGrammarOptions flexible;
  flexible.flexible_whitespace = true;
  flexible.max_whitespace = 3;
  check_random_walks(*json_schema_to_grammar(kSchemas[0], flexible), 100, 6, 40);
}

TEST(GrammarMatcher, MasksEqualBruteForceOnEbnf) {
  std::uint32_t seed = 50;
  for (const char* s : kEbnf)
    check_random_walks(from_ebnf(s), seed++, 8, 30);
}

TEST(GrammarMatcher, EosOnlyWhereTheGrammarAccepts) {
  auto vocab = byte_vocab({"ab"});
  auto trie = *TokenTrie::build(vocab);
  auto cg = compile(from_ebnf("root ::= \"a\" \"b\"?"), trie);
  GrammarMatcher m(cg);
  const std::int32_t eos = vocab.eos_ids[0], special = eos + 1;
  auto bit = [&](std::int32_t t) {
    auto w = fast_mask(m);
    return (w[t / 32] >> (t % 32) & 1) != 0;
  };
  EXPECT_FALSE(bit(eos));
  EXPECT_FALSE(m.accept_token(eos));
  EXPECT_TRUE(bit('a'));
  EXPECT_TRUE(bit(256));  // "ab"
  EXPECT_FALSE(bit('b'));
  ASSERT_TRUE(m.accept_token('a'));
  EXPECT_TRUE(bit(eos));
  EXPECT_TRUE(bit('b'));
  EXPECT_FALSE(bit(special));
  EXPECT_FALSE(m.accept_token(special));
  ASSERT_TRUE(m.accept_token('b'));
  EXPECT_TRUE(m.can_terminate());
  auto w = fast_mask(m);
  for (std::size_t t = 0; t < vocab.tokens.size(); ++t)
    EXPECT_EQ((w[t / 32] >> (t % 32) & 1) != 0, static_cast<std::int32_t>(t) == eos) << t;
  ASSERT_TRUE(m.accept_token(eos));
  EXPECT_TRUE(m.is_terminated());
  for (auto word : fast_mask(m))
    EXPECT_EQ(word, 0u);
  EXPECT_FALSE(m.accept_token('a'));
  ASSERT_TRUE(m.rollback(1).ok());
  EXPECT_FALSE(m.is_terminated());
}

TEST(GrammarMatcher, RollbackRestoresMasksExactly) {
  std::mt19937 rng(5);
  auto vocab = random_vocab(rng, 300, "{}[]\":,0123456789abcdefnrstu-.", 4);
  auto trie = *TokenTrie::build(vocab);
  auto cg = compile(from_schema(kSchemas[1]), trie);
  const std::string doc = R"({"v":1.5,"kids":[{"v":2},{"v":-3,"kids":[]}]})";
  GrammarMatcher m(cg, 100);
  std::vector<std::vector<std::uint32_t>> masks{fast_mask(m)};
  std::vector<std::int32_t> tokens;
  for (std::size_t i = 0; i < doc.size();) {
    auto [id, len] = trie->longest_prefix(std::string_view(doc).substr(i));
    ASSERT_GE(id, 0);
    ASSERT_TRUE(m.accept_token(id)) << "at byte " << i;
    tokens.push_back(id);
    masks.push_back(fast_mask(m));
    i += len;
  }
  EXPECT_TRUE(m.can_terminate());
  for (std::size_t k : {1u, 3u, 7u}) {
    ASSERT_TRUE(m.rollback(k).ok());
    ASSERT_EQ(fast_mask(m), masks[masks.size() - 1 - k]) << "after rolling back " << k;
    // Re-accept and land on the same final mask.
    for (std::size_t j = tokens.size() - k; j < tokens.size(); ++j)
      ASSERT_TRUE(m.accept_token(tokens[j]));
    ASSERT_EQ(fast_mask(m), masks.back());
  }
  EXPECT_FALSE(m.rollback(101).ok());
  GrammarMatcher small(cg, 2);
  ASSERT_TRUE(small.accept_token(tokens[0]));
  ASSERT_TRUE(small.accept_token(tokens[1]));
  ASSERT_TRUE(small.accept_token(tokens[2]));
  EXPECT_FALSE(small.rollback(3).ok());
  EXPECT_TRUE(small.rollback(2).ok());
}

TEST(GrammarMatcher, JumpForwardStrings) {
  auto vocab = byte_vocab();
  auto trie = *TokenTrie::build(vocab);
  auto cg = compile(
      from_schema(
          R"({"type":"object","properties":{"name":{"type":"string"},"kind":{"const":"cat"},"n":{"type":"integer"}},"required":["name","kind"]})"),
      trie);
  GrammarMatcher m(cg);
  EXPECT_EQ(m.find_jump_forward_string(), "{\"name\":\"");
  ASSERT_TRUE(m.accept_bytes("{\"name\":\"Tom"));
  EXPECT_EQ(m.find_jump_forward_string(), "");  // more characters or the closing quote
  ASSERT_TRUE(m.accept_bytes("\""));
  EXPECT_EQ(m.find_jump_forward_string(), ",\"kind\":\"cat\"");
  ASSERT_TRUE(m.accept_bytes(",\"kind\":\"cat\""));
  EXPECT_EQ(m.find_jump_forward_string(), "");  // '}' or ',"n":'
  EXPECT_FALSE(m.accept_bytes("}x"));
  ASSERT_TRUE(m.accept_bytes(","));
  EXPECT_EQ(m.find_jump_forward_string(), "\"n\":");
  EXPECT_EQ(m.find_jump_forward_string(3), "\"n\"");
  // Where the grammar may end, nothing is forced.
  auto done = compile(from_ebnf("root ::= \"ab\" \"cd\"?"), trie);
  GrammarMatcher d(done);
  EXPECT_EQ(d.find_jump_forward_string(), "ab");
  ASSERT_TRUE(d.accept_bytes("ab"));
  EXPECT_EQ(d.find_jump_forward_string(), "");
  ASSERT_TRUE(d.accept_bytes("c"));
  EXPECT_EQ(d.find_jump_forward_string(), "d");
}

TEST(GrammarMatcher, DuplicateTokensShareTheirBit) {
  auto vocab = byte_vocab({"ab", "ab"});
  auto trie = *TokenTrie::build(vocab);
  auto cg = compile(from_ebnf("root ::= \"ab\""), trie);
  GrammarMatcher m(cg);
  auto w = fast_mask(m);
  EXPECT_TRUE(w[256 / 32] >> (256 % 32) & 1);
  EXPECT_TRUE(w[257 / 32] >> (257 % 32) & 1);
  EXPECT_TRUE(m.accept_token(257));
}

TEST(TokenTrie, RejectsBadVocabularies) {
  TokenizerVocab empty;
  EXPECT_FALSE(TokenTrie::build(empty).ok());
  auto v = byte_vocab();
  v.eos_ids = {100000};
  EXPECT_FALSE(TokenTrie::build(v).ok());
  v = byte_vocab();
  v.special.pop_back();
  EXPECT_FALSE(TokenTrie::build(v).ok());
  v = byte_vocab({std::string(5000, 'a')});
  EXPECT_FALSE(TokenTrie::build(v).ok());
}

}  // namespace
}  // namespace weft::grammar
