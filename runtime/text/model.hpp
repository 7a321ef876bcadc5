#pragma once
// The model stage of the pipeline (BPE, WordPiece, Unigram) and the vocabulary they share.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace weft::text {

// Token strings by id, and the reverse map. Ids may have holes (added tokens live beside the
// model's vocabulary), so `token(id)` can be null. A file may list a few tokens with ids in the
// millions: the strings are then kept by entry, not by id (a vector as long as the largest id
// would cost hundreds of MB for a few KB of file).
class Vocabulary {
 public:
  Vocabulary() = default;
  // Entries are (token, id); a repeated token keeps its last id, as serde's map does.
  explicit Vocabulary(std::vector<std::pair<std::string, std::uint32_t>> entries);
  Vocabulary(Vocabulary&& other) noexcept { *this = std::move(other); }
  Vocabulary& operator=(Vocabulary&& other) noexcept;
  Vocabulary(const Vocabulary&) = delete;
  Vocabulary& operator=(const Vocabulary&) = delete;

  std::optional<std::uint32_t> find(std::string_view token) const {
    auto it = ids_.find(token);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  const std::string* token(std::uint32_t id) const {
    if (!sparse_) return id < tokens_.size() && has_[id] ? &tokens_[id] : nullptr;
    return sparse_token(id);
  }
  // One past the largest id.
  std::size_t id_bound() const { return bound_; }
  std::size_t size() const { return ids_.size(); }
  // Calls fn(id, token) for every id that has a token, in increasing id order.
  template <typename Fn>
  void for_each(Fn&& fn) const {
    for (std::size_t i = 0; i < tokens_.size(); ++i) {
      if (sparse_) {
        fn(sparse_ids_[i], tokens_[i]);
      } else if (has_[i]) {
        fn(static_cast<std::uint32_t>(i), tokens_[i]);
      }
    }
  }

 private:
  const std::string* sparse_token(std::uint32_t id) const;

  // Dense: tokens_[id], has_[id]. Sparse: tokens_[i] is the token of id sparse_ids_[i]
  // (ascending).
  bool sparse_ = false;
  std::size_t bound_ = 0;
  std::vector<std::string> tokens_;
  std::vector<bool> has_;
  std::vector<std::uint32_t> sparse_ids_;
  std::unordered_map<std::string_view, std::uint32_t> ids_;  // views into tokens_
};

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of one pre-token (a word) to `ids`.
  virtual void encode(std::string_view word, std::vector<std::uint32_t>& ids) const = 0;
  virtual const Vocabulary& vocabulary() const = 0;
};

}  // namespace weft::text
