// The matcher on the real Llama-3 vocabulary (128,256 tokens, byte-level BPE): masks equal the
// brute-force ones along valid documents. Needs scripts/fetch-test-data BUILD_DIR.

#include "runtime/grammar/grammar_matcher.hpp"
#include "runtime/grammar/json_schema_to_grammar.hpp"
#include "tests/runtime/grammar/grammar_test_util.hpp"

namespace weft::grammar {
namespace {

using namespace testing;

TEST(Llama3Vocab, ReadsByteLevelTokens) {
  auto vocab = llama3_vocab();
  ASSERT_TRUE(vocab);
  ASSERT_EQ(vocab->tokens.size(), 128256u);
  EXPECT_EQ(vocab->tokens[0], "!");
  EXPECT_EQ(vocab->eos_ids.size(), 2u);
  std::size_t special = 0, with_space = 0;
  for (std::size_t i = 0; i < vocab->tokens.size(); ++i) {
    special += vocab->special[i];
    with_space += !vocab->special[i] && vocab->tokens[i].starts_with(" ");
  }
  EXPECT_EQ(special, 256u);       // <|begin_of_text|> ... <|reserved_special_token_247|>
  EXPECT_GT(with_space, 20000u);  // 'Ġ' mapped back to a space byte
}

// Every token under a node whose string_classes() holds kStringUtf8 is JSON string text from
// that node's edge on, and the flag is exact: a subtree with one token that is not gets none.
TEST(Llama3Vocab, StringClassesOfSubtrees) {
  auto vocab = llama3_vocab();
  ASSERT_TRUE(vocab);
  auto trie = TokenTrie::build(*vocab);
  ASSERT_TRUE(trie.ok());
  const TokenTrie& t = **trie;
  auto string_text = [](std::string_view bytes, StringClass klass) {
    int q = 0;
    for (char c : bytes)
      if ((q = string_class_step(klass, q, static_cast<std::uint8_t>(c))) < 0) return false;
    return true;
  };
  // Depth-first over the trie with each node's depth, checking every child of the root and a
  // sample of deeper nodes against their subtree's tokens.
  std::vector<std::pair<std::uint32_t, std::size_t>> todo{{t.root(), 0}};
  std::size_t checked = 0, whole = 0;
  while (!todo.empty()) {
    auto [v, depth] = todo.back();
    todo.pop_back();
    const auto& node = t.node(v);
    for (std::uint32_t c = node.first_child; c < node.first_child + node.child_count; ++c)
      todo.push_back({c, depth + 1});
    if (v == t.root() || (depth > 1 && v % 97 != 0)) continue;
    for (StringClass klass : {kStringUtf8, kStringAscii}) {
      bool all = true;
      for (std::uint32_t i = t.node(v).subtree_begin; i < t.node(v).subtree_end && all; ++i)
        all = string_text(std::string_view(vocab->tokens[t.order()[i]]).substr(depth - 1), klass);
      ASSERT_EQ(all, (t.string_classes(v) & klass) != 0) << "node " << v << " class " << int(klass);
      whole += all;
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000u);
  EXPECT_GT(whole, checked / 4);
  EXPECT_EQ(string_class_step(kStringUtf8, 0, 0xED), 5);  // then 80-9F only: no surrogates
  EXPECT_LT(string_class_step(kStringUtf8, 5, 0xA0), 0);
  EXPECT_LT(string_class_step(kStringUtf8, 0, 0xC0), 0);  // overlong
  EXPECT_LT(string_class_step(kStringUtf8, 0, '"'), 0);
  EXPECT_EQ(string_class_step(kStringUtf8, 0, 0x7F), 0);
  EXPECT_LT(string_class_step(kStringAscii, 0, 0xC3), 0);
}

TEST(Llama3Vocab, MasksEqualBruteForceAlongDocuments) {
  auto vocab = llama3_vocab();
  ASSERT_TRUE(vocab);
  auto trie = TokenTrie::build(*vocab);
  ASSERT_TRUE(trie.ok());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array","items":{"type":"string"},"maxItems":3},"when":{"type":"string","format":"date"}},"required":["name","age"]})",
       R"({"name":"Ada \"the first\" Lovelace","age":36,"tags":["math","poetry"],"when":"1843-07-10"})"},
      {R"({"$defs":{"n":{"type":"object","properties":{"v":{"type":"number"},"kids":{"type":"array","items":{"$ref":"#/$defs/n"}}},"required":["v"]}},"$ref":"#/$defs/n"})",
       R"({"v":1.25,"kids":[{"v":-2},{"v":3e5,"kids":[]}]})"},
      // A bounded string: each copy of x{0,n} has the character's alternatives inlined, and its
      // masks precomputed in that copy's context (inner copies reusing the outermost's verdicts
      // for short tokens), so few tokens are left to check at run time.
      {R"({"type":"object","properties":{"t":{"type":"string","maxLength":7},"u":{"type":"string"}},"required":["t","u"]})",
       R"({"t":"abc de\"","u":"free text"})"},
      // Free strings holding multi-byte characters and escapes, and extra property names
      // (printable ASCII): the positions where whole subtrees of string text are accepted
      // without walking them (TokenTrie::string_classes).
      {R"({"type":"object","properties":{"s":{"type":"string"}},"required":["s"],"additionalProperties":{"type":"string"}})",
       R"({"s":"caf\u00e9 café 日本語 😀 \\ \n end","x y":"über"})"},
      // A counted string (maxLength above 32): per-count masks, the string subtrees accepted
      // whole while enough characters are left, and the bound reached (48 characters).
      {R"({"type":"object","properties":{"t":{"type":"string","minLength":3,"maxLength":48}},"required":["t"]})",
       R"({"t":"na\u00efve café 日本 text and more text, up to 48 chars"})"},
  };
  for (const auto& [schema, doc] : cases) {
    auto g = json_schema_to_grammar(schema);
    ASSERT_TRUE(g.ok()) << g.error().what();
    auto cg = CompiledGrammar::compile(*g, *trie);
    ASSERT_TRUE(cg.ok()) << cg.error().what();
    if (schema.find("maxLength") != std::string::npos) {
      EXPECT_LT((*cg)->largest_uncertain().second, 200u) << (*cg)->largest_uncertain().first;
    }
    GrammarMatcher m(*cg);
    std::size_t step = 0;
    for (std::size_t i = 0; i < doc.size(); ++step) {
      auto [id, len] = (*trie)->longest_prefix(std::string_view(doc).substr(i));
      ASSERT_GE(id, 0);
      auto fast = fast_mask(m);
      if (step % 4 == 0) {
        ASSERT_TRUE(same_mask(fast, brute_mask(m, vocab->tokens.size()), *vocab))
            << schema << " step " << step;
      }
      ASSERT_TRUE(fast[id / 32] >> (id % 32) & 1)
          << "document token '" << vocab->tokens[id] << "' not allowed at byte " << i;
      for (auto eos : vocab->eos_ids)
        EXPECT_FALSE(fast[eos / 32] >> (eos % 32) & 1);
      ASSERT_TRUE(m.accept_token(id));
      i += len;
    }
    auto fast = fast_mask(m);
    ASSERT_TRUE(same_mask(fast, brute_mask(m, vocab->tokens.size()), *vocab));
    for (auto eos : vocab->eos_ids)
      EXPECT_TRUE(fast[eos / 32] >> (eos % 32) & 1);
    EXPECT_TRUE(m.accept_token(vocab->eos_ids[0]));
  }
}

}  // namespace
}  // namespace weft::grammar
