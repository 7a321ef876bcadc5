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

  const void* key(std::size_t pos, std::size_t kv_head) const {
    return block(pos) + (kv_head * page_size + pos % page_size) * head_dim * element_bytes();
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
  const unsigned char* block(std::size_t pos) const {
    return static_cast<const unsigned char*>(pages[pos / page_size]);
  }
  float scale(std::size_t pos, std::size_t kv_head, std::size_t head_offset) const {
    if (!kv_dtype_scaled(dtype)) return 1.0f;
    const auto* scales = reinterpret_cast<const float*>(block(pos) + scales_offset);
    return scales[(head_offset + kv_head) * page_size + pos % page_size];
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
