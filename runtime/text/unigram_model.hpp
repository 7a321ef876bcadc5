#pragma once
// Unigram language model (SentencePiece's, as T5 and XLM-R use it): the segmentation with the
// highest total log-probability, by Viterbi over the pieces found with a trie.

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/text/model.hpp"
#include "weft/error.hpp"

namespace weft::text {

class UnigramModel final : public Model {
 public:
  // `pieces` are (token, log-probability) with ids in order; fails when unk_id is out of range.
  static Result<UnigramModel> create(std::vector<std::pair<std::string, double>> pieces,
                                     std::optional<std::uint32_t> unk_id, bool byte_fallback);

  void encode(std::string_view word, std::vector<std::uint32_t>& ids) const override;
  const Vocabulary& vocabulary() const override { return vocabulary_; }

 private:
  // Byte trie: child of (node, byte) in a hash map; terminal node -> piece id.
  std::optional<std::uint32_t> child(std::uint32_t node, unsigned char byte) const {
    auto it = children_.find((static_cast<std::uint64_t>(node) << 8) | byte);
    if (it == children_.end()) return std::nullopt;
    return it->second;
  }

  Vocabulary vocabulary_;
  std::vector<double> scores_;
  std::unordered_map<std::uint64_t, std::uint32_t> children_;
  std::vector<std::int64_t> terminal_;  // per trie node: piece id or -1
  std::optional<std::uint32_t> unk_id_;
  bool byte_fallback_ = false;
  double min_score_ = 0;
  std::uint32_t byte_ids_[256] = {};
  bool has_all_byte_tokens_ = false;
};

}  // namespace weft::text
