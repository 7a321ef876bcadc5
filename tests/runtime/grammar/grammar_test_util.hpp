#pragma once
// Helpers shared by the grammar tests: whole-string matching straight on the pushdown
// automaton, vocabularies, a brute-force bitmask (every token tried through accept_token and
// rolled back, so it shares nothing with the precomputed masks), and the real Llama-3 vocab.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/grammar/grammar_compiler.hpp"
#include "runtime/grammar/grammar_matcher.hpp"
#include "runtime/grammar/pushdown.hpp"
#include "runtime/grammar/tokenizer_vocab.hpp"

namespace weft::grammar::testing {

// Does the grammar match exactly `text`?
inline bool matches(const FlatGrammar& flat, std::string_view text) {
  StackArena arena;
  Pushdown pda(flat, arena);
  StackSet cur, next;
  pda.start(cur);
  for (char c : text) {
    pda.step(cur, static_cast<std::uint8_t>(c), next);
    std::swap(cur, next);
    if (cur.empty() && !cur.accepted) return false;
  }
  return cur.accepted;
}

inline bool matches(const Grammar& g, std::string_view text) {
  auto flat = flatten_grammar(g);
  if (!flat) {
    ADD_FAILURE() << flat.error().what();
    return false;
  }
  return matches(*flat, text);
}

// All 256 single bytes (so every string is tokenizable) plus `extra` multi-byte tokens, an
// end-of-sequence token and a special token that must never be allowed.
inline TokenizerVocab byte_vocab(const std::vector<std::string>& extra = {}) {
  TokenizerVocab v;
  for (int b = 0; b < 256; ++b)
    v.tokens.push_back(std::string(1, static_cast<char>(b)));
  for (const auto& e : extra)
    v.tokens.push_back(e);
  v.tokens.push_back("<eos>");
  v.tokens.push_back("<special>");
  v.special.assign(v.tokens.size(), false);
  v.special[v.tokens.size() - 1] = v.special[v.tokens.size() - 2] = true;
  v.eos_ids = {static_cast<std::int32_t>(v.tokens.size() - 2)};
  return v;
}

// Random tokens over `alphabet` (lengths 1..max_len), on top of byte_vocab.
inline TokenizerVocab random_vocab(std::mt19937& rng, std::size_t count, std::string_view alphabet,
                                   std::size_t max_len) {
  std::vector<std::string> extra;
  std::uniform_int_distribution<std::size_t> len(2, max_len), pick(0, alphabet.size() - 1);
  for (std::size_t i = 0; i < count; ++i) {
    std::string t;
    for (std::size_t n = len(rng); n-- > 0;)
      t += alphabet[pick(rng)];
    extra.push_back(t);
  }
  return byte_vocab(extra);
}

inline std::vector<std::uint32_t> fast_mask(GrammarMatcher& m) {
  std::vector<std::uint32_t> words(m.bitmask_words());
  m.fill_next_token_bitmask(words);
  return words;
}

inline std::vector<std::uint32_t> brute_mask(GrammarMatcher& m, std::size_t vocab_size) {
  std::vector<std::uint32_t> words((vocab_size + 31) / 32);
  for (std::size_t t = 0; t < vocab_size; ++t) {
    if (m.accept_token(static_cast<std::int32_t>(t))) {
      words[t / 32] |= 1u << (t % 32);
      EXPECT_TRUE(m.rollback(1).ok());
    }
  }
  return words;
}

// Compares bitmasks and names the first differing tokens.
inline ::testing::AssertionResult same_mask(const std::vector<std::uint32_t>& fast,
                                            const std::vector<std::uint32_t>& brute,
                                            const TokenizerVocab& vocab) {
  std::ostringstream diff;
  int shown = 0;
  for (std::size_t t = 0; t < vocab.tokens.size() && shown < 8; ++t) {
    bool a = fast[t / 32] >> (t % 32) & 1, b = brute[t / 32] >> (t % 32) & 1;
    if (a != b) {
      diff << " token " << t << " '" << vocab.tokens[t] << "' fast=" << a << " brute=" << b << ";";
      ++shown;
    }
  }
  if (shown) return ::testing::AssertionFailure() << "masks differ:" << diff.str();
  return ::testing::AssertionSuccess();
}

inline std::filesystem::path llama3_tokenizer_path() {
  return std::filesystem::path(WEFT_BINARY_DIR) / "test-data/tokenizers/llama3/tokenizer.json";
}

// The Llama-3 vocabulary with <|end_of_text|> and <|eot_id|> as end-of-sequence; fails the
// test (with what to run) when the file is absent.
inline std::optional<TokenizerVocab> llama3_vocab() {
  auto path = llama3_tokenizer_path();
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << path << " is missing: run scripts/fetch-test-data " << WEFT_BINARY_DIR;
    return std::nullopt;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  auto v = vocab_from_tokenizer_json(ss.str());
  if (!v) {
    ADD_FAILURE() << v.error().what();
    return std::nullopt;
  }
  for (std::size_t i = 0; i < v->tokens.size(); ++i)
    if (v->tokens[i] == "<|end_of_text|>" || v->tokens[i] == "<|eot_id|>")
      v->eos_ids.push_back(static_cast<std::int32_t>(i));
  return std::move(*v);
}

}  // namespace weft::grammar::testing
