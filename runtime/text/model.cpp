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
  rebuild_index();
  // A token listed twice maps to the id it was listed with last.
  for (const auto& [token, id] : entries)
    ids_[std::string_view(tokens_[id])] = id;
}

Vocabulary& Vocabulary::operator=(Vocabulary&& other) noexcept {
  tokens_ = std::move(other.tokens_);
  has_ = std::move(other.has_);
  rebuild_index();
  return *this;
}

void Vocabulary::rebuild_index() {
  // string_view keys must point into this object's strings (SSO strings move their bytes).
  ids_.clear();
  ids_.reserve(tokens_.size());
  for (std::uint32_t id = 0; id < tokens_.size(); ++id) {
    if (has_[id]) ids_[std::string_view(tokens_[id])] = id;
  }
}

}  // namespace weft::text
