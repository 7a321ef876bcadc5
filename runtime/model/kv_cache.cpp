#include "runtime/model/kv_cache.hpp"

#include <stdexcept>
#include <string>

#include "kernels/cpu/kv_quant.hpp"

namespace weft::model {

KvCache::KvCache(KvLayout layout, int num_pages) : layout_(layout), num_pages_(num_pages) {
  if (num_pages <= 0 || layout.page_size <= 0 || layout.num_layers <= 0 ||
      layout.num_kv_heads <= 0 || layout.head_dim <= 0) {
    throw std::invalid_argument("KvCache: pages, page_size and layout dimensions must be positive");
  }
  const std::size_t bytes = layout_.bytes_per_page() * static_cast<std::size_t>(num_pages);
  data_.assign((bytes + sizeof(float) - 1) / sizeof(float), 0.0f);
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

void KvCache::store_token(int page, int layer, int slot, const float* k, const float* v) noexcept {
  const auto dim = static_cast<std::size_t>(layout_.head_dim);
  for (int kh = 0; kh < layout_.num_kv_heads; ++kh) {
    store_head(page, layer, kh, slot, k + static_cast<std::size_t>(kh) * dim,
               v + static_cast<std::size_t>(kh) * dim);
  }
}

void KvCache::store_head(int page, int layer, int head_row, int slot, const float* k,
                         const float* v) noexcept {
  unsigned char* block = layer_bytes(page, layer);
  const auto heads = static_cast<std::size_t>(layout_.num_kv_heads);
  const auto page_size = static_cast<std::size_t>(layout_.page_size);
  const auto dim = static_cast<std::size_t>(layout_.head_dim);
  const std::size_t element = kv_element_bytes(layout_.dtype);
  auto* scales = reinterpret_cast<float*>(block + layout_.scales_offset());
  const auto kh = static_cast<std::size_t>(head_row);
  const std::size_t k_row = kh * page_size + static_cast<std::size_t>(slot);
  const std::size_t v_row = (heads + kh) * page_size + static_cast<std::size_t>(slot);
  const float k_scale = cpu::store_kv_row(layout_.dtype, k, dim, block + k_row * dim * element);
  const float v_scale = cpu::store_kv_row(layout_.dtype, v, dim, block + v_row * dim * element);
  if (kv_dtype_scaled(layout_.dtype)) {
    scales[k_row] = k_scale;
    scales[v_row] = v_scale;
  }
}

void KvCache::set_head_cells(int first_page, kv::HeadCells cells) {
  head_cells_[first_page] = std::move(cells);
}

const kv::HeadCells* KvCache::head_cells(int first_page) const noexcept {
  const auto it = head_cells_.find(first_page);
  return it == head_cells_.end() ? nullptr : &it->second;
}

}  // namespace weft::model
