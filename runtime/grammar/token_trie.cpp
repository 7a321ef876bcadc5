#include "runtime/grammar/token_trie.hpp"

#include <algorithm>
#include <numeric>

namespace weft::grammar {

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
