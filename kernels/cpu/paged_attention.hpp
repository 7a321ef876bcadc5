#pragma once
// Causal attention of one token's query heads over keys and values held in fixed-size pages
// (vLLM's PagedAttention; page_size 1 is LightLLM's token-level TokenAttention). Grouped-query
// attention maps query head h to kv head h / (num_heads / num_kv_heads).

#include <cstddef>

#include "kernels/cpu/vector_math.hpp"
#include "kernels/kv_dtype.hpp"

namespace weft::cpu {

// One layer's view of a sequence's pages. pages[i] is the block of the i-th page-table entry
// for this layer: K as [num_kv_heads][page_size][head_dim] elements of `dtype`, then V in the
// same shape; for the quantized types the rows' scales follow (KvLayout::scales_offset): K's
// [num_kv_heads][page_size] fp32, then V's.
struct PagedKv {
  const void* const* pages = nullptr;
  std::size_t page_size = 0;
  std::size_t num_kv_heads = 0;
  std::size_t head_dim = 0;
  KvDtype dtype = KvDtype::kF32;
  std::size_t scales_offset = 0;  // bytes from a block's start to its K scales
  // Per-head cells (variable KV-Compress, kv::HeadCells): when head_blocks is set, kv head
  // h's slot s lives in block head_blocks[h * cells_per_head + s / page_size], in that block's
  // rows of kv head head_rows[the same index], instead of pages[s / page_size] at its own
  // rows; and paged_attention lets head h see head_shift[h] slots past the query's last slot
  // (the slots it evicted fewer than the sequence's mean).
  const void* const* head_blocks = nullptr;
  const int* head_rows = nullptr;
  std::size_t cells_per_head = 0;
  const int* head_shift = nullptr;

  const void* key(std::size_t pos, std::size_t kv_head) const {
    const std::size_t cell = cell_of(pos, kv_head);
    return block_at(cell) +
           (row_of(kv_head, cell) * page_size + pos % page_size) * head_dim * element_bytes();
  }
  std::size_t shift(std::size_t kv_head) const {
    return head_shift != nullptr ? static_cast<std::size_t>(head_shift[kv_head]) : 0;
  }
  const void* value(std::size_t pos, std::size_t kv_head) const {
    return static_cast<const unsigned char*>(key(pos, kv_head)) +
           num_kv_heads * page_size * head_dim * element_bytes();
  }
  // The row's scale: 1 for the float types.
  float key_scale(std::size_t pos, std::size_t kv_head) const { return scale(pos, kv_head, 0); }
  float value_scale(std::size_t pos, std::size_t kv_head) const {
    return scale(pos, kv_head, num_kv_heads);
  }

 private:
  std::size_t element_bytes() const { return kv_element_bytes(dtype); }
  std::size_t cell_of(std::size_t pos, std::size_t kv_head) const {
    return head_blocks != nullptr ? kv_head * cells_per_head + pos / page_size : pos / page_size;
  }
  const unsigned char* block_at(std::size_t cell) const {
    return static_cast<const unsigned char*>(head_blocks != nullptr ? head_blocks[cell]
                                                                    : pages[cell]);
  }
  std::size_t row_of(std::size_t kv_head, std::size_t cell) const {
    return head_blocks != nullptr ? static_cast<std::size_t>(head_rows[cell]) : kv_head;
  }
  float scale(std::size_t pos, std::size_t kv_head, std::size_t head_offset) const {
    if (!kv_dtype_scaled(dtype)) return 1.0f;
    const std::size_t cell = cell_of(pos, kv_head);
    const auto* scales = reinterpret_cast<const float*>(block_at(cell) + scales_offset);
    return scales[(head_offset + row_of(kv_head, cell)) * page_size + pos % page_size];
  }
};

// out[h] = softmax(q[h] . K[first..last] * scale + bias_h) V[first..last] for every query
// head h (last + kv.shift(its kv head) with per-head cells). q and out are [num_heads, head_dim];
// scratch holds last - first + 1 floats. alibi_slopes: null, or [num_heads] ALiBi slopes; then
// bias_h for key position j is slope_h * (j - last_pos) (Press et al.; BLOOM adds slope_h * j, the
// same after softmax).
void paged_attention(const float* q, std::size_t num_heads, const PagedKv& kv,
                     std::size_t first_pos, std::size_t last_pos, float scale, float* out,
                     float* scratch, KernelPath path = KernelPath::kAuto,
                     const float* alibi_slopes = nullptr);

}  // namespace weft::cpu
