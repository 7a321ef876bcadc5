// Masks computed on first use (CompiledGrammar): compiling computes none, and matchers on
// several threads sharing one lazily filled grammar see exactly the masks of a grammar whose
// masks were all computed up front, along valid documents on the Llama-3 vocabulary. Needs
// scripts/fetch-test-data BUILD_DIR.

#include <thread>

#include "runtime/grammar/grammar_matcher.hpp"
#include "runtime/grammar/json_schema_to_grammar.hpp"
#include "tests/runtime/grammar/grammar_test_util.hpp"

namespace weft::grammar {
namespace {

using namespace testing;

struct Case {
  std::string schema, doc;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},"email":{"type":"string","format":"email"},"active":{"type":"boolean"}},"required":["name","age","active"]})",
       R"({"name":"Ada \"the first\" Lovelace","age":36,"email":"ada@engine.org","active":true})"},
      {R"({"type":"object","properties":{"id":{"type":"string","format":"uuid"},"created":{"type":"string","format":"date-time"},"code":{"type":"string","pattern":"^[A-Z]{3}-\\d{4}$"},"title":{"type":"string","maxLength":12}},"required":["id","created","code","title"]})",
       R"({"id":"123e4567-e89b-12d3-a456-426614174000","created":"2024-05-17T09:30:00Z","code":"ABC-1234","title":"short title"})"},
      {R"({"$defs":{"node":{"type":"object","properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["name"]}},"$ref":"#/$defs/node"})",
       R"({"name":"root","children":[{"name":"a","children":[{"name":"leaf"}]},{"name":"b","children":[]}]})"},
  };
  return c;
}

// The masks along `doc` (greedy longest-prefix tokens), ending after the last token.
std::vector<std::vector<std::uint32_t>> masks_along(std::shared_ptr<const CompiledGrammar> cg,
                                                    const std::string& doc) {
  std::vector<std::vector<std::uint32_t>> out;
  GrammarMatcher m(cg);
  for (std::size_t i = 0; i < doc.size();) {
    out.push_back(fast_mask(m));
    auto [id, len] = cg->trie().longest_prefix(std::string_view(doc).substr(i));
    if (id < 0 || !m.accept_token(id)) break;
    i += len;
  }
  out.push_back(fast_mask(m));
  return out;
}

TEST(LazyMasks, CompileComputesNoMaskAndFirstUseComputesFew) {
  auto vocab = llama3_vocab();
  ASSERT_TRUE(vocab);
  auto trie = TokenTrie::build(*vocab);
  ASSERT_TRUE(trie.ok());
  auto g = json_schema_to_grammar(cases()[0].schema);
  ASSERT_TRUE(g.ok()) << g.error().what();
  auto cg = CompiledGrammar::compile(*g, *trie);
  ASSERT_TRUE(cg.ok()) << cg.error().what();
  EXPECT_EQ((*cg)->computed_mask_count(), 0u);
  GrammarMatcher m(*cg);
  fast_mask(m);
  const std::size_t after_one = (*cg)->computed_mask_count();
  EXPECT_GE(after_one, 1u);
  EXPECT_LT(after_one, (*cg)->position_count() / 4);
  (*cg)->precompute_all();
  EXPECT_GE((*cg)->computed_mask_count(), (*cg)->position_count());
}

TEST(LazyMasks, EqualEagerMasksFromConcurrentMatchers) {
  auto vocab = llama3_vocab();
  ASSERT_TRUE(vocab);
  auto trie = TokenTrie::build(*vocab);
  ASSERT_TRUE(trie.ok());
  for (const auto& c : cases()) {
    auto g = json_schema_to_grammar(c.schema);
    ASSERT_TRUE(g.ok()) << g.error().what();
    auto eager = CompiledGrammar::compile(*g, *trie);
    auto lazy = CompiledGrammar::compile(*g, *trie);
    ASSERT_TRUE(eager.ok() && lazy.ok());
    (*eager)->precompute_all();
    const auto want = masks_along(*eager, c.doc);
    ASSERT_GT(want.size(), 10u);
    // Four matchers race to fill the same lazy grammar.
    std::vector<std::vector<std::vector<std::uint32_t>>> got(4);
    std::vector<std::thread> threads;
    for (auto& out : got)
      threads.emplace_back([&out, &lazy, &c] { out = masks_along(*lazy, c.doc); });
    for (auto& t : threads)
      t.join();
    for (const auto& masks : got) {
      ASSERT_EQ(masks.size(), want.size()) << c.schema;
      for (std::size_t i = 0; i < want.size(); ++i)
        ASSERT_TRUE(same_mask(masks[i], want[i], *vocab)) << c.schema << " step " << i;
    }
    EXPECT_EQ((*lazy)->uncertain_count(), (*eager)->uncertain_count());
  }
}

}  // namespace
}  // namespace weft::grammar
