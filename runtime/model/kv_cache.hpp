#pragma once
// Key/value storage in fixed-size pages, and the free list that hands them out. The forward
// pass only reads and writes pages through a sequence's page table; who owns the pages is
// the caller's business, so the engine's reference-counted pool can replace the free list
// here without touching the forward pass.

#include <cstddef>
#include <optional>
#include <vector>

namespace weft::model {

struct KvLayout {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int page_size = 16;  // tokens per page

  // One layer's block in a page: K [num_kv_heads][page_size][head_dim], then V alike.
  std::size_t floats_per_layer_block() const {
    return 2 * static_cast<std::size_t>(num_kv_heads) * page_size * head_dim;
  }
  std::size_t floats_per_page() const { return floats_per_layer_block() * num_layers; }
};

// fp32 pages in one heap allocation, made once (DESIGN.md: the pool is sized at start).
class KvCache {
 public:
  KvCache(KvLayout layout, int num_pages);

  const KvLayout& layout() const noexcept { return layout_; }
  int num_pages() const noexcept { return num_pages_; }
  int free_pages() const noexcept { return static_cast<int>(free_.size()); }

  // Pages needed to hold `tokens` positions.
  int pages_for(int tokens) const noexcept {
    return (tokens + layout_.page_size - 1) / layout_.page_size;
  }
  // nullopt when every page is taken: the count is exact, so callers can plan ahead.
  std::optional<int> allocate_page();
  void release_page(int page);

  float* layer_block(int page, int layer) noexcept {
    return data_.data() + static_cast<std::size_t>(page) * layout_.floats_per_page() +
           static_cast<std::size_t>(layer) * layout_.floats_per_layer_block();
  }

 private:
  KvLayout layout_;
  int num_pages_;
  std::vector<float> data_;
  std::vector<int> free_;  // a stack, so the most recently freed (cache-warm) page goes first
};

}  // namespace weft::model
