#pragma once
// Causal attention of one token's query heads over keys and values held in fixed-size pages
// (vLLM's PagedAttention; page_size 1 is LightLLM's token-level TokenAttention). Grouped-query
// attention maps query head h to kv head h / (num_heads / num_kv_heads).

#include <cstddef>

#include "kernels/cpu/vector_math.hpp"

namespace weft::cpu {

// One layer's view of a sequence's pages. pages[i] is the block of the i-th page-table entry
// for this layer: K as [num_kv_heads][page_size][head_dim], then V in the same shape.
struct PagedKv {
  const float* const* pages = nullptr;
  std::size_t page_size = 0;
  std::size_t num_kv_heads = 0;
  std::size_t head_dim = 0;

  const float* key(std::size_t pos, std::size_t kv_head) const {
    return pages[pos / page_size] + (kv_head * page_size + pos % page_size) * head_dim;
  }
  const float* value(std::size_t pos, std::size_t kv_head) const {
    return key(pos, kv_head) + num_kv_heads * page_size * head_dim;
  }
};

// out[h] = softmax(q[h] . K[first..last] * scale + bias_h) V[first..last] for every query
// head h. q and out are [num_heads, head_dim]; scratch holds last - first + 1 floats.
// alibi_slopes: null, or [num_heads] ALiBi slopes; then bias_h for key position j is
// slope_h * (j - last_pos) (Press et al.; BLOOM adds slope_h * j, the same after softmax).
void paged_attention(const float* q, std::size_t num_heads, const PagedKv& kv,
                     std::size_t first_pos, std::size_t last_pos, float scale, float* out,
                     float* scratch, KernelPath path = KernelPath::kAuto,
                     const float* alibi_slopes = nullptr);

}  // namespace weft::cpu
