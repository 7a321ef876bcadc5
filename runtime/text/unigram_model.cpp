#include "runtime/text/unigram_model.hpp"

#include <algorithm>
#include <cstdio>

#include "runtime/text/utf8.hpp"

namespace weft::text {
namespace {
constexpr double kUnknownPenalty = 10.0;  // tokenizers' K_UNK_PENALTY
}

Result<UnigramModel> UnigramModel::create(std::vector<std::pair<std::string, double>> pieces,
                                          std::optional<std::uint32_t> unk_id, bool byte_fallback) {
  UnigramModel model;
  if (unk_id && *unk_id >= pieces.size()) {
    return Error(ErrorCode::kParse, "Unigram unk_id " + std::to_string(*unk_id) +
                                        " is beyond the vocabulary of " +
                                        std::to_string(pieces.size()) + " pieces");
  }
  model.unk_id_ = unk_id;
  model.byte_fallback_ = byte_fallback;
  model.terminal_.push_back(-1);
  std::vector<std::pair<std::string, std::uint32_t>> entries;
  entries.reserve(pieces.size());
  model.scores_.reserve(pieces.size());
  model.min_score_ = pieces.empty() ? 0.0 : pieces.front().second;
  for (std::uint32_t id = 0; id < pieces.size(); ++id) {
    auto& [token, score] = pieces[id];
    model.min_score_ = std::min(model.min_score_, score);
    model.scores_.push_back(score);
    std::uint32_t node = 0;
    for (unsigned char b : token) {
      auto next = model.child(node, b);
      if (!next) {
        next = static_cast<std::uint32_t>(model.terminal_.size());
        model.terminal_.push_back(-1);
        model.children_.emplace((static_cast<std::uint64_t>(node) << 8) | b, *next);
      }
      node = *next;
    }
    if (model.terminal_[node] < 0) model.terminal_[node] = id;
    entries.emplace_back(std::move(token), id);
  }
  model.vocabulary_ = Vocabulary(std::move(entries));
  model.has_all_byte_tokens_ = true;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto id = model.vocabulary_.find(name);
    if (id) {
      model.byte_ids_[b] = *id;
    } else {
      model.has_all_byte_tokens_ = false;
    }
  }
  return model;
}

void UnigramModel::encode(std::string_view word, std::vector<std::uint32_t>& ids) const {
  if (word.empty()) return;
  struct Node {
    std::int64_t id = -1;
    double score = 0;
    std::int64_t starts_at = -1;
  };
  const std::size_t size = word.size();
  const double unk_score = min_score_ - kUnknownPenalty;
  std::vector<Node> best(size + 1);
  best[0].starts_at = 0;
  // Follows tokenizers' Unigram::encode_optimized: strict improvement only, shorter pieces
  // first, an unknown single character when no piece covers exactly that character.
  for (std::size_t start = 0; start < size;) {
    const double base = best[start].score;
    const std::size_t char_len =
        std::min(utf8_length(static_cast<unsigned char>(word[start])), size - start);
    bool has_single = false;
    std::uint32_t node = 0;
    for (std::size_t k = start; k < size; ++k) {
      auto next = child(node, static_cast<unsigned char>(word[k]));
      if (!next) break;
      node = *next;
      const std::int64_t id = terminal_[node];
      if (id < 0) continue;
      const std::size_t end = k + 1;
      const double candidate = scores_[static_cast<std::size_t>(id)] + base;
      Node& target = best[end];
      if (target.starts_at < 0 || candidate > target.score) {
        target = {id, candidate, static_cast<std::int64_t>(start)};
      }
      if (end - start == char_len) has_single = true;
    }
    if (!has_single) {
      Node& target = best[start + char_len];
      const double candidate = unk_score + base;
      if (target.starts_at < 0 || candidate > target.score) {
        target = {unk_id_ ? static_cast<std::int64_t>(*unk_id_) : -1, candidate,
                  static_cast<std::int64_t>(start)};
      }
    }
    start += char_len;
  }
  // Walk back; consecutive unknown pieces fuse into one (fuse_unk is always on for Unigram).
  std::vector<std::pair<std::size_t, std::size_t>> spans;  // (begin, end) of each token
  for (std::size_t end = size; end > 0;) {
    const Node& n = best[end];
    const auto begin = static_cast<std::size_t>(n.starts_at);
    const bool unk = unk_id_ && n.id == static_cast<std::int64_t>(*unk_id_);
    if (unk && !spans.empty() && spans.back().first == end &&
        best[spans.back().second].id == static_cast<std::int64_t>(*unk_id_)) {
      spans.back().first = begin;
    } else {
      spans.emplace_back(begin, end);
    }
    end = begin;
  }
  for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
    const std::string_view piece = word.substr(it->first, it->second - it->first);
    if (auto id = vocabulary_.find(piece)) {
      ids.push_back(*id);
    } else if (byte_fallback_ && has_all_byte_tokens_) {
      for (unsigned char b : piece)
        ids.push_back(byte_ids_[b]);
    } else if (unk_id_) {
      ids.push_back(*unk_id_);
    }
  }
}

}  // namespace weft::text
