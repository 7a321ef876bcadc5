#pragma once
// The vocabulary as the matcher sees it: each token's byte string, which ids are special
// (never produced by a grammar: they are excluded from the trie) and which ids end the
// sequence. The trie lets one walk share the work of every token with a common prefix.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/error.hpp"

namespace weft::grammar {

// Byte automata of the text inside a JSON string, for the vocabulary-level precomputation
// below: kStringUtf8 accepts any valid UTF-8 (RFC 3629: no overlongs, no surrogates) other than
// '"', '\\' and the C0 controls, exactly what a free JSON string holds unescaped; kStringAscii
// the same restricted to ASCII (0x20-0x7F). State 0 is a character boundary.
enum StringClass : std::uint8_t { kStringUtf8 = 1, kStringAscii = 2 };
inline constexpr int kStringClassStates = 8;
// The next state from `state` on `byte`, or -1 where the automaton rejects it.
int string_class_step(StringClass klass, int state, std::uint8_t byte);

struct TokenizerVocab {
  std::vector<std::string> tokens;  // token id -> bytes
  std::vector<bool> special;        // same size as tokens (or empty: none special)
  std::vector<std::int32_t> eos_ids;
};

class TokenTrie {
 public:
  struct Node {
    std::int32_t token = -1;        // the token ending here, or -1
    std::uint32_t first_child = 0;  // children are nodes [first_child, first_child+count)
    std::uint32_t child_count = 0;
    std::uint8_t byte = 0;            // the byte on the edge into this node
    std::uint32_t subtree_begin = 0;  // tokens of this subtree: order_[begin, end)
    std::uint32_t subtree_end = 0;
  };

  static Result<std::shared_ptr<const TokenTrie>> build(TokenizerVocab vocab);

  const Node& node(std::uint32_t i) const { return nodes_[i]; }
  std::uint32_t root() const { return 0; }
  // Token ids in trie (depth-first) order, so a subtree is a contiguous slice.
  const std::vector<std::int32_t>& order() const { return order_; }
  // A token's index in order(), or -1 for tokens outside the trie (special, empty, aliases).
  std::int32_t order_index(std::int32_t token) const { return order_index_[token]; }
  const TokenizerVocab& vocab() const { return vocab_; }
  std::size_t vocab_size() const { return vocab_.tokens.size(); }
  std::size_t node_count() const { return nodes_.size(); }
  std::size_t max_token_bytes() const { return max_token_bytes_; }
  // The length in bytes of the longest token in node i's subtree (its own included).
  std::uint16_t deepest(std::uint32_t i) const { return deepest_[i]; }
  // The StringClass bits whose automaton, started at a character boundary at the edge into
  // node i, accepts every path of the subtree (the edge's byte and all below): every token of
  // the subtree, read from that edge on, is text a free JSON string may hold. Schema-independent,
  // so made once per vocabulary; the mask precomputation accepts such a subtree whole, without
  // walking it, where the grammar's state is a string's (CompiledGrammar::precompute).
  std::uint8_t string_classes(std::uint32_t i) const { return string_classes_[i]; }
  bool is_eos(std::int32_t id) const;
  // The longest token that is a prefix of `text`: (id, length), or (-1, 0) when none. Greedy
  // tokenization for tests and benchmarks, and for re-tokenizing a jump-forward string.
  std::pair<std::int32_t, std::size_t> longest_prefix(std::string_view text) const;
  // (token, owner): tokens whose bytes equal an earlier token's; they share its mask bit.
  const std::vector<std::pair<std::int32_t, std::int32_t>>& aliases() const { return aliases_; }

 private:
  TokenizerVocab vocab_;
  std::vector<Node> nodes_;
  std::vector<std::int32_t> order_;
  std::vector<std::uint16_t> deepest_;
  std::vector<std::uint8_t> string_classes_;
  std::vector<std::int32_t> order_index_;
  std::vector<std::pair<std::int32_t, std::int32_t>> aliases_;
  std::size_t max_token_bytes_ = 0;
};

}  // namespace weft::grammar
