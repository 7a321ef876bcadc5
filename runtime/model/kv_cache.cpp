#include "runtime/model/kv_cache.hpp"

#include <stdexcept>
#include <string>

namespace weft::model {

KvCache::KvCache(KvLayout layout, int num_pages) : layout_(layout), num_pages_(num_pages) {
  if (num_pages <= 0 || layout.page_size <= 0 || layout.num_layers <= 0 ||
      layout.num_kv_heads <= 0 || layout.head_dim <= 0) {
    throw std::invalid_argument("KvCache: pages, page_size and layout dimensions must be positive");
  }
  data_.assign(layout_.floats_per_page() * static_cast<std::size_t>(num_pages), 0.0f);
  free_.reserve(static_cast<std::size_t>(num_pages));
  for (int p = num_pages - 1; p >= 0; --p)
    free_.push_back(p);
}

std::optional<int> KvCache::allocate_page() {
  if (free_.empty()) return std::nullopt;
  const int page = free_.back();
  free_.pop_back();
  return page;
}

void KvCache::release_page(int page) {
  if (page < 0 || page >= num_pages_) {
    throw std::out_of_range("KvCache::release_page: page " + std::to_string(page) +
                            " is not in [0, " + std::to_string(num_pages_) + ")");
  }
  free_.push_back(page);
}

}  // namespace weft::model
