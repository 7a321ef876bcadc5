#include "runtime/text/model.hpp"

#include <algorithm>

namespace weft::text {

Vocabulary::Vocabulary(std::vector<std::pair<std::string, std::uint32_t>> entries) {
  std::uint32_t bound = 0;
  for (const auto& e : entries)
    bound = std::max(bound, e.second + 1);
  tokens_.resize(bound);
  has_.assign(bound, false);
  for (auto& [token, id] : entries) {
    tokens_[id] = std::move(token);
    has_[id] = true;
  }
  // Only the listed ids, not every id below the bound: a file may list a few tokens with ids
  // in the millions. A token listed twice maps to the id it was listed with last.
  ids_.reserve(entries.size());
  for (const auto& [token, id] : entries)
    ids_[std::string_view(tokens_[id])] = id;
}

Vocabulary& Vocabulary::operator=(Vocabulary&& other) noexcept {
  if (this == &other) return *this;
  // Moving the vector hands over its buffer, so the strings stay where they are and the
  // index's string_view keys (which point into them, short strings included) stay valid.
  tokens_ = std::move(other.tokens_);
  has_ = std::move(other.has_);
  ids_ = std::move(other.ids_);
  other.tokens_.clear();
  other.has_.clear();
  other.ids_.clear();
  return *this;
}

}  // namespace weft::text
