#pragma once
// Key/value storage in fixed-size pages, and the free list that hands them out. The forward
// pass only reads and writes pages through a sequence's page table; who owns the pages is
// the caller's business, so the engine's reference-counted pool can replace the free list
// here without touching the forward pass.

#include <cstddef>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kernels/kv_dtype.hpp"
#include "runtime/kv/kv_compress.hpp"

namespace weft::model {

struct KvLayout {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int page_size = 16;  // tokens per page
  // The element type of K and V (kernels/kv_dtype.hpp). The quantized ones add a scale per
  // (token, kv head) row after the elements.
  KvDtype dtype = KvDtype::kF32;

  // One layer's block in a page: K [num_kv_heads][page_size][head_dim], then V alike
  // (elements, whatever their type), then for the quantized types K's scales
  // [num_kv_heads][page_size] fp32 and V's alike, from 16-byte aligned offsets.
  std::size_t floats_per_layer_block() const {
    return 2 * static_cast<std::size_t>(num_kv_heads) * page_size * head_dim;
  }
  std::size_t floats_per_page() const { return floats_per_layer_block() * num_layers; }
  // Bytes from a layer block's start to its K scales (the elements' bytes, aligned).
  std::size_t scales_offset() const {
    const std::size_t bytes = floats_per_layer_block() * kv_element_bytes(dtype);
    return kv_dtype_scaled(dtype) ? align16(bytes) : bytes;
  }
  std::size_t bytes_per_layer_block() const {
    if (!kv_dtype_scaled(dtype)) return scales_offset();
    return align16(scales_offset() +
                   2 * static_cast<std::size_t>(num_kv_heads) * page_size * sizeof(float));
  }
  std::size_t bytes_per_page() const { return bytes_per_layer_block() * num_layers; }

 private:
  static std::size_t align16(std::size_t n) { return (n + 15) / 16 * 16; }
};

// Pages in one heap allocation, made once (DESIGN.md: the pool is sized at start), holding
// elements of layout.dtype.
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

  // A layer's block of a page (KvLayout's layout); as floats for an f32 cache.
  unsigned char* layer_bytes(int page, int layer) noexcept {
    return reinterpret_cast<unsigned char*>(data_.data()) +
           static_cast<std::size_t>(page) * layout_.bytes_per_page() +
           static_cast<std::size_t>(layer) * layout_.bytes_per_layer_block();
  }
  float* layer_block(int page, int layer) noexcept {
    return reinterpret_cast<float*>(layer_bytes(page, layer));
  }
  // Stores one token's keys and values (k and v: [num_kv_heads][head_dim] floats) into slot
  // `slot` of a page's layer block, converted to (quantized into) the layout's dtype.
  void store_token(int page, int layer, int slot, const float* k, const float* v) noexcept;
  // The same for one kv head's row: k and v are head_dim floats, stored in kv head
  // `head_row`'s rows of the block (a variable KV-Compress cell, kv::HeadCells).
  void store_head(int page, int layer, int head_row, int slot, const float* k,
                  const float* v) noexcept;

  // Variable KV-Compress (runtime/kv/kv_compress.hpp): where each (layer, kv head) of a
  // compressed sequence keeps its slots, recorded by the step that compressed it and keyed by
  // the sequence's first page. A compressed sequence holds that page until it ends (its pages
  // are released from the back, and compressed pages never join the prefix cache), and the
  // next sequence to start on that page and compress replaces the record; slices that are not
  // variably compressed never read it.
  void set_head_cells(int first_page, kv::HeadCells cells);
  // nullptr when no record holds that page.
  const kv::HeadCells* head_cells(int first_page) const noexcept;

 private:
  KvLayout layout_;
  int num_pages_;
  std::unordered_map<int, kv::HeadCells> head_cells_;
  std::vector<float> data_;  // floats for their alignment; bytes_per_page() each page
  std::vector<int> free_;    // a stack, so the most recently freed (cache-warm) page goes first
};

}  // namespace weft::model
