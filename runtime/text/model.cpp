#include "runtime/text/model.hpp"

#include <algorithm>

namespace weft::text {

Vocabulary::Vocabulary(std::vector<std::pair<std::string, std::uint32_t>> entries) {
  std::uint32_t bound = 0;
  for (const auto& e : entries)
    bound = std::max(bound, e.second + 1);
  bound_ = bound;
  // Real vocabularies number their tokens from 0 with few holes; by entry when most of the
  // ids below the bound would be holes.
  sparse_ = bound > 2 * entries.size() + 65536;
  // Where each entry's id keeps its token: the id itself, or its place among the distinct ids.
  std::vector<std::uint32_t> slot(entries.size());
  if (!sparse_) {
    tokens_.resize(bound);
    has_.assign(bound, false);
    for (std::size_t i = 0; i < entries.size(); ++i)
      slot[i] = entries[i].second;
  } else {
    for (const auto& e : entries)
      sparse_ids_.push_back(e.second);
    std::sort(sparse_ids_.begin(), sparse_ids_.end());
    sparse_ids_.erase(std::unique(sparse_ids_.begin(), sparse_ids_.end()), sparse_ids_.end());
    tokens_.resize(sparse_ids_.size());
    for (std::size_t i = 0; i < entries.size(); ++i) {
      slot[i] = static_cast<std::uint32_t>(
          std::lower_bound(sparse_ids_.begin(), sparse_ids_.end(), entries[i].second) -
          sparse_ids_.begin());
    }
  }
  // An id listed twice keeps the token it was listed with last.
  for (std::size_t i = 0; i < entries.size(); ++i) {
    tokens_[slot[i]] = std::move(entries[i].first);
    if (!sparse_) has_[slot[i]] = true;
  }
  // Only the listed ids, not every id below the bound. A token listed twice maps to the id it
  // was listed with last.
  ids_.reserve(entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i)
    ids_[std::string_view(tokens_[slot[i]])] = entries[i].second;
}

const std::string* Vocabulary::sparse_token(std::uint32_t id) const {
  auto it = std::lower_bound(sparse_ids_.begin(), sparse_ids_.end(), id);
  if (it == sparse_ids_.end() || *it != id) return nullptr;
  return &tokens_[static_cast<std::size_t>(it - sparse_ids_.begin())];
}

Vocabulary& Vocabulary::operator=(Vocabulary&& other) noexcept {
  if (this == &other) return *this;
  // Moving the vector hands over its buffer, so the strings stay where they are and the
  // index's string_view keys (which point into them, short strings included) stay valid.
  sparse_ = other.sparse_;
  bound_ = other.bound_;
  tokens_ = std::move(other.tokens_);
  has_ = std::move(other.has_);
  sparse_ids_ = std::move(other.sparse_ids_);
  ids_ = std::move(other.ids_);
  other.sparse_ = false;
  other.bound_ = 0;
  other.tokens_.clear();
  other.has_.clear();
  other.sparse_ids_.clear();
  other.ids_.clear();
  return *this;
}

}  // namespace weft::text
