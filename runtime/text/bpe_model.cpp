#include "runtime/text/bpe_model.hpp"

#include <cstdio>
#include <queue>

#include "runtime/text/utf8.hpp"

namespace weft::text {
namespace {

constexpr std::uint64_t kEmpty = ~std::uint64_t{0};

std::uint64_t pair_key(std::uint32_t left, std::uint32_t right) {
  return (static_cast<std::uint64_t>(left) << 32) | right;
}

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

struct Symbol {
  std::uint32_t id;
  std::int32_t prev, next;
  std::uint32_t len;  // bytes; 0 once merged into its left neighbour
};

struct Candidate {
  std::uint32_t rank, pos, merged;
  // std::priority_queue pops the largest: invert so the lowest rank, then leftmost, comes first.
  bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

void BpeModel::MergeTable::build(
    const std::vector<std::pair<std::uint64_t, std::uint64_t>>& entries) {
  std::size_t capacity = 16;
  while (capacity < entries.size() * 2)
    capacity <<= 1;
  keys.assign(capacity, kEmpty);
  values.assign(capacity, 0);
  mask = capacity - 1;
  for (const auto& [key, value] : entries) {
    std::uint64_t slot = mix(key) & mask;
    while (keys[slot] != kEmpty && keys[slot] != key)
      slot = (slot + 1) & mask;
    // A repeated merge keeps its last rank: tokenizers collects the merges into a HashMap.
    keys[slot] = key;
    values[slot] = value;
  }
}

bool BpeModel::MergeTable::find(std::uint32_t left, std::uint32_t right, std::uint32_t& rank,
                                std::uint32_t& merged) const {
  const std::uint64_t key = pair_key(left, right);
  for (std::uint64_t slot = mix(key) & mask;; slot = (slot + 1) & mask) {
    if (keys[slot] == key) {
      rank = static_cast<std::uint32_t>(values[slot] >> 32);
      merged = static_cast<std::uint32_t>(values[slot]);
      return true;
    }
    if (keys[slot] == kEmpty) return false;
  }
}

Result<BpeModel> BpeModel::create(Vocabulary vocabulary,
                                  const std::vector<std::pair<std::string, std::string>>& merges,
                                  BpeOptions options) {
  BpeModel model;
  model.vocabulary_ = std::move(vocabulary);
  model.options_ = std::move(options);
  const auto& vocab = model.vocabulary_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> entries;
  entries.reserve(merges.size());
  const std::size_t prefix_len = model.options_.continuing_subword_prefix.size();
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    auto left = vocab.find(a), right = vocab.find(b);
    // The merged token drops the right part's continuing-subword prefix, as tokenizers does.
    std::string joined = a;
    joined.append(b.size() >= prefix_len &&
                          b.compare(0, prefix_len, model.options_.continuing_subword_prefix) == 0
                      ? std::string_view(b).substr(prefix_len)
                      : std::string_view(b));
    auto merged = vocab.find(joined);
    if (!left || !right || !merged) {
      const std::string& missing = !left ? a : !right ? b : joined;
      return Error(ErrorCode::kParse, "BPE merge " + std::to_string(rank) + " (\"" + a + "\" \"" +
                                          b + "\") names \"" + missing +
                                          "\", which is not in the vocabulary");
    }
    entries.emplace_back(pair_key(*left, *right),
                         (static_cast<std::uint64_t>(rank) << 32) | *merged);
  }
  model.merges_.build(entries);
  if (model.options_.unk_token) model.unk_id_ = vocab.find(*model.options_.unk_token);
  model.has_all_byte_tokens_ = true;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto id = vocab.find(name);
    if (id) {
      model.byte_ids_[b] = *id;
    } else {
      model.has_all_byte_tokens_ = false;
    }
  }
  return model;
}

void BpeModel::encode(std::string_view word, std::vector<std::uint32_t>& ids) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (auto id = vocabulary_.find(word)) {
      ids.push_back(*id);
      return;
    }
  }
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  const auto add = [&](std::uint32_t id, std::uint32_t len) {
    const auto index = static_cast<std::int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, len});
  };
  // An unknown run waiting to be added (fused with the next unknown character when fuse_unk).
  bool pending_unk = false;
  std::uint32_t pending_unk_bytes = 0;
  const bool affixes =
      !options_.continuing_subword_prefix.empty() || !options_.end_of_word_suffix.empty();
  std::string scratch;
  for (std::size_t pos = 0; pos < word.size();) {
    const std::size_t begin = pos;
    pos += utf8_length(static_cast<unsigned char>(word[pos]));
    std::string_view piece = word.substr(begin, pos - begin);
    if (affixes) {
      scratch.clear();
      if (begin > 0) scratch += options_.continuing_subword_prefix;
      scratch += piece;
      if (pos >= word.size()) scratch += options_.end_of_word_suffix;
      piece = scratch;
    }
    const auto len = static_cast<std::uint32_t>(pos - begin);
    if (auto id = vocabulary_.find(piece)) {
      if (pending_unk) {
        add(*unk_id_, pending_unk_bytes);
        pending_unk = false;
      }
      add(*id, len);
      continue;
    }
    if (options_.byte_fallback && has_all_byte_tokens_) {
      for (std::size_t k = begin; k < pos; ++k)
        add(byte_ids_[static_cast<unsigned char>(word[k])], 1);
      continue;
    }
    if (unk_id_) {
      if (pending_unk && options_.fuse_unk) {
        pending_unk_bytes += len;
      } else {
        if (pending_unk) add(*unk_id_, pending_unk_bytes);
        pending_unk = true;
        pending_unk_bytes = len;
      }
    }
  }
  if (pending_unk) add(*unk_id_, pending_unk_bytes);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::priority_queue<Candidate> queue;
  std::uint32_t rank = 0, merged = 0;
  for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (merges_.find(symbols[i].id, symbols[i + 1].id, rank, merged)) {
      queue.push({rank, static_cast<std::uint32_t>(i), merged});
    }
  }
  // Mirrors tokenizers' Word::merge_all, stale queue entries included: an entry is applied when
  // its pair still exists and still merges into the same id.
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& current = symbols[top.pos];
    if (current.len == 0 || current.next < 0) continue;
    const auto next_pos = static_cast<std::size_t>(current.next);
    const Symbol right = symbols[next_pos];
    if (!merges_.find(current.id, right.id, rank, merged) || merged != top.merged) continue;
    current.id = top.merged;
    current.len += right.len;
    current.next = right.next;
    symbols[next_pos].len = 0;
    if (right.next >= 0)
      symbols[static_cast<std::size_t>(right.next)].prev = static_cast<std::int32_t>(top.pos);
    if (current.prev >= 0 && merges_.find(symbols[static_cast<std::size_t>(current.prev)].id,
                                          current.id, rank, merged)) {
      queue.push({rank, static_cast<std::uint32_t>(current.prev), merged});
    }
    if (current.next >= 0 &&
        merges_.find(current.id, symbols[static_cast<std::size_t>(current.next)].id, rank,
                     merged)) {
      queue.push({rank, top.pos, merged});
    }
  }
  for (const auto& s : symbols) {
    if (s.len != 0) ids.push_back(s.id);
  }
}

}  // namespace weft::text
