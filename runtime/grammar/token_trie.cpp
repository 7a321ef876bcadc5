#include "runtime/grammar/token_trie.hpp"

#include <algorithm>
#include <numeric>

namespace weft::grammar {

int string_class_step(StringClass klass, int state, std::uint8_t b) {
  if (klass == kStringAscii)
    return state == 0 && b >= 0x20 && b < 0x80 && b != '"' && b != '\\' ? 0 : -1;
  // States: 0 boundary; 1, 2, 3 continuation bytes left (any of 0x80-0xBF); 4 after E0 (next
  // A0-BF), 5 after ED (next 80-9F: no surrogates), 6 after F0 (next 90-BF), 7 after F4 (next
  // 80-8F: at most U+10FFFF).
  switch (state) {
    case 0:
      if (b < 0x80) return b >= 0x20 && b != '"' && b != '\\' ? 0 : -1;
      if (b >= 0xC2 && b <= 0xDF) return 1;
      if (b == 0xE0) return 4;
      if (b == 0xED) return 5;
      if (b >= 0xE1 && b <= 0xEF) return 2;
      if (b == 0xF0) return 6;
      if (b >= 0xF1 && b <= 0xF3) return 3;
      if (b == 0xF4) return 7;
      return -1;
    case 1:
    case 2:
    case 3:
      return b >= 0x80 && b <= 0xBF ? state - 1 : -1;
    case 4:
      return b >= 0xA0 && b <= 0xBF ? 1 : -1;
    case 5:
      return b >= 0x80 && b <= 0x9F ? 1 : -1;
    case 6:
      return b >= 0x90 && b <= 0xBF ? 2 : -1;
    case 7:
      return b >= 0x80 && b <= 0x8F ? 2 : -1;
    default:
      return -1;
  }
}

Result<std::shared_ptr<const TokenTrie>> TokenTrie::build(TokenizerVocab vocab) {
  const std::size_t n = vocab.tokens.size();
  if (n == 0) return Error(ErrorCode::kInvalidArgument, "vocabulary is empty");
  if (n > 0x7fffffff) return Error(ErrorCode::kInvalidArgument, "vocabulary too large");
  if (!vocab.special.empty() && vocab.special.size() != n)
    return Error(ErrorCode::kInvalidArgument,
                 "vocabulary has " + std::to_string(n) + " tokens but " +
                     std::to_string(vocab.special.size()) + " special flags");
  if (vocab.special.empty()) vocab.special.assign(n, false);
  // The trie walks recurse once per byte of a token; real vocabularies stay far below this.
  constexpr std::size_t kMaxTokenBytes = 2048;
  for (std::size_t i = 0; i < n; ++i)
    if (!vocab.special[i] && vocab.tokens[i].size() > kMaxTokenBytes)
      return Error(ErrorCode::kInvalidArgument,
                   "token " + std::to_string(i) + " is " + std::to_string(vocab.tokens[i].size()) +
                       " bytes long; the limit is " + std::to_string(kMaxTokenBytes));
  for (auto id : vocab.eos_ids)
    if (id < 0 || static_cast<std::size_t>(id) >= n)
      return Error(ErrorCode::kOutOfRange, "end-of-sequence id " + std::to_string(id) +
                                               " is outside the vocabulary of " +
                                               std::to_string(n));

  auto trie = std::shared_ptr<TokenTrie>(new TokenTrie());
  // Sorting the byte strings makes a trie's depth-first order; building it level by level
  // from the sorted list keeps every node's children contiguous.
  std::vector<std::int32_t> ids;
  for (std::size_t i = 0; i < n; ++i)
    if (!vocab.special[i] && !vocab.tokens[i].empty()) ids.push_back(static_cast<std::int32_t>(i));
  std::sort(ids.begin(), ids.end(),
            [&](auto a, auto b) { return vocab.tokens[a] < vocab.tokens[b]; });

  auto& nodes = trie->nodes_;
  nodes.push_back(Node{});
  // Each node to expand: its index, depth, and the slice of `ids` (sorted) under it.
  struct Work {
    std::uint32_t node;
    std::size_t depth, begin, end;
  };
  std::vector<Work> queue{{0, 0, 0, ids.size()}};
  for (std::size_t q = 0; q < queue.size(); ++q) {
    Work w = queue[q];
    std::size_t i = w.begin;
    // A token equal to the prefix sorts first.
    while (i < w.end && vocab.tokens[ids[i]].size() == w.depth) {
      // Duplicate byte strings: the first id owns the node; the others are aliases whose mask
      // bit the matcher copies from the owner's.
      if (nodes[w.node].token < 0)
        nodes[w.node].token = ids[i];
      else
        trie->aliases_.push_back({ids[i], nodes[w.node].token});
      ++i;
    }
    nodes[w.node].first_child = static_cast<std::uint32_t>(nodes.size());
    while (i < w.end) {
      auto b = static_cast<std::uint8_t>(vocab.tokens[ids[i]][w.depth]);
      std::size_t j = i;
      while (j < w.end && static_cast<std::uint8_t>(vocab.tokens[ids[j]][w.depth]) == b)
        ++j;
      Node child;
      child.byte = b;
      nodes.push_back(child);
      queue.push_back({static_cast<std::uint32_t>(nodes.size() - 1), w.depth + 1, i, j});
      ++nodes[w.node].child_count;
      i = j;
    }
  }
  // Subtree slices in depth-first order.
  std::vector<std::pair<std::uint32_t, bool>> stack{{0, false}};
  auto& order = trie->order_;
  while (!stack.empty()) {
    auto [v, done] = stack.back();
    stack.pop_back();
    if (done) {
      nodes[v].subtree_end = static_cast<std::uint32_t>(order.size());
      continue;
    }
    nodes[v].subtree_begin = static_cast<std::uint32_t>(order.size());
    if (nodes[v].token >= 0) order.push_back(nodes[v].token);
    stack.push_back({v, true});
    for (std::uint32_t c = nodes[v].child_count; c-- > 0;)
      stack.push_back({nodes[v].first_child + c, false});
  }
  for (std::size_t i = 0; i < n; ++i)
    if (!vocab.special[i])
      trie->max_token_bytes_ = std::max(trie->max_token_bytes_, vocab.tokens[i].size());
  {
    // The longest token below each node, in bytes: schema-independent, so made once per
    // vocabulary (the mask precomputation of every grammar uses it). The trie is breadth-first:
    // children come after their parent.
    std::vector<std::uint16_t> depth(nodes.size(), 0);
    auto& deepest = trie->deepest_;
    deepest.assign(nodes.size(), 0);
    for (std::size_t v = 0; v < nodes.size(); ++v)
      for (std::uint32_t c = 0; c < nodes[v].child_count; ++c)
        depth[nodes[v].first_child + c] = static_cast<std::uint16_t>(depth[v] + 1);
    for (std::size_t v = nodes.size(); v-- > 0;) {
      if (nodes[v].token >= 0) deepest[v] = std::max(deepest[v], depth[v]);
      for (std::uint32_t c = 0; c < nodes[v].child_count; ++c)
        deepest[v] = std::max(deepest[v], deepest[nodes[v].first_child + c]);
    }
  }
  {
    // ok[v] bit q: the UTF-8 string automaton started in state q at v's edge accepts the whole
    // subtree. Children come after their parent, so one backward pass computes it.
    std::vector<std::uint16_t> ok(nodes.size(), 0);
    std::vector<std::uint8_t> ascii(nodes.size(), 0);
    auto& classes = trie->string_classes_;
    classes.assign(nodes.size(), 0);
    for (std::size_t v = nodes.size(); v-- > 1;) {
      const Node& node = nodes[v];
      std::uint16_t bits = 0;
      for (int q = 0; q < kStringClassStates; ++q) {
        int next = string_class_step(kStringUtf8, q, node.byte);
        if (next < 0) continue;
        bool all = true;
        for (std::uint32_t c = 0; c < node.child_count && all; ++c)
          all = (ok[node.first_child + c] >> next) & 1;
        if (all) bits |= static_cast<std::uint16_t>(1u << q);
      }
      ok[v] = bits;
      bool a = string_class_step(kStringAscii, 0, node.byte) == 0;
      for (std::uint32_t c = 0; c < node.child_count && a; ++c)
        a = ascii[node.first_child + c] != 0;
      ascii[v] = a;
      classes[v] =
          static_cast<std::uint8_t>(((bits & 1) ? kStringUtf8 : 0) | (a ? kStringAscii : 0));
    }
  }
  trie->order_index_.assign(n, -1);
  for (std::size_t i = 0; i < order.size(); ++i)
    trie->order_index_[order[i]] = static_cast<std::int32_t>(i);
  trie->vocab_ = std::move(vocab);
  return std::shared_ptr<const TokenTrie>(std::move(trie));
}

std::pair<std::int32_t, std::size_t> TokenTrie::longest_prefix(std::string_view text) const {
  std::pair<std::int32_t, std::size_t> best{-1, 0};
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const Node& n = nodes_[v];
    // Children are sorted by byte: binary search.
    std::uint32_t lo = n.first_child, hi = n.first_child + n.child_count;
    auto b = static_cast<std::uint8_t>(text[i]);
    while (lo < hi) {
      std::uint32_t mid = (lo + hi) / 2;
      if (nodes_[mid].byte < b)
        lo = mid + 1;
      else
        hi = mid;
    }
    if (lo == n.first_child + n.child_count || nodes_[lo].byte != b) break;
    v = lo;
    if (nodes_[v].token >= 0) best = {nodes_[v].token, i + 1};
  }
  return best;
}

bool TokenTrie::is_eos(std::int32_t id) const {
  return std::find(vocab_.eos_ids.begin(), vocab_.eos_ids.end(), id) != vocab_.eos_ids.end();
}

}  // namespace weft::grammar
