// Matching time of an ambiguous counted repetition (docs/reliability.md): a regex such as
// (a|ab|b){0,3000} lets a prefix of "abab..." finish many different numbers of copies, so the
// matcher must not keep one stack per count. Reports, per pattern, the time to accept the text
// in one accept_bytes call and byte by byte (one accept_bytes per byte, as a decode of
// single-byte tokens would), the live stacks at the end, and whether the whole text matched.
// Usage: grammar_ambiguous_bench [BYTES] [PATTERN]...
//   default BYTES 6000; default patterns (a|ab|b){0,3000} and (a?b?){1,3000}.
//   The text is "abab..." of BYTES bytes.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/grammar/grammar_matcher.hpp"
#include "runtime/grammar/regex_to_grammar.hpp"
#include "runtime/grammar/token_trie.hpp"

using namespace weft;
using namespace weft::grammar;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t bytes = argc > 1 ? static_cast<std::size_t>(std::atol(argv[1])) : 6000;
  std::vector<std::string> patterns;
  for (int i = 2; i < argc; ++i)
    patterns.emplace_back(argv[i]);
  if (patterns.empty()) patterns = {"(a|ab|b){0,3000}", "(a?b?){1,3000}"};
  std::string text;
  for (std::size_t i = 0; i < bytes; ++i)
    text += i % 2 ? 'b' : 'a';
  // Every single byte a token, plus an end-of-sequence.
  TokenizerVocab vocab;
  for (int b = 0; b < 256; ++b)
    vocab.tokens.emplace_back(1, static_cast<char>(b));
  vocab.tokens.emplace_back("<eos>");
  vocab.special.assign(vocab.tokens.size(), false);
  vocab.special.back() = true;
  vocab.eos_ids = {256};
  auto trie = TokenTrie::build(vocab);
  if (!trie) {
    std::fprintf(stderr, "%s\n", trie.error().what());
    return 1;
  }
  for (const auto& pattern : patterns) {
    auto g = regex_to_grammar(pattern);
    if (!g) {
      std::fprintf(stderr, "%s: %s\n", pattern.c_str(), g.error().what());
      return 1;
    }
    auto cg = CompiledGrammar::compile(*g, *trie);
    if (!cg) {
      std::fprintf(stderr, "%s: %s\n", pattern.c_str(), cg.error().what());
      return 1;
    }
    GrammarMatcher whole(*cg);
    auto start = Clock::now();
    const bool ok = whole.accept_bytes(text);
    const double whole_s = seconds_since(start);
    std::printf("%-24s %zu bytes  one call: %.3f s  matched=%d  stacks=%zu\n", pattern.c_str(),
                bytes, whole_s, ok && whole.can_terminate(), whole.stack_count());
    std::fflush(stdout);
    GrammarMatcher each(*cg, 0);
    std::vector<std::uint32_t> words(each.bitmask_words());
    start = Clock::now();
    bool all = true;
    std::size_t max_stacks = 0;
    for (char c : text) {
      each.fill_next_token_bitmask(words);
      all = all && (words[static_cast<std::uint8_t>(c) / 32] >> (c % 32) & 1) != 0;
      all = all && each.accept_bytes(std::string_view(&c, 1));
      max_stacks = std::max(max_stacks, each.stack_count());
    }
    const double each_s = seconds_since(start);
    std::printf(
        "%-24s %zu bytes  mask+accept per byte: %.3f s (%.1f us/byte)  ok=%d  max stacks=%zu\n",
        pattern.c_str(), bytes, each_s, each_s * 1e6 / static_cast<double>(bytes), all, max_stacks);
    std::fflush(stdout);
  }
  return 0;
}
