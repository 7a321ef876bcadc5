#include "kernels/cpu/kv_compress.hpp"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/kv_quant.hpp"
#include "kernels/cpu/softmax.hpp"

namespace weft::cpu {

void window_attention_scores(const float* q, std::size_t window, std::size_t num_heads,
                             const PagedKv& kv, std::size_t slots, float scale, float* scores,
                             float* scratch, KernelPath path) {
  path = resolve(path);
  std::fill(scores, scores + kv.num_kv_heads * slots, 0.0f);
  window = std::min(window, slots);
  const std::size_t group = num_heads / kv.num_kv_heads;
  for (std::size_t w = 0; w < window; ++w) {
    const std::size_t last = slots - window + w;  // this query's own slot
    const float* qw = q + w * num_heads * kv.head_dim;
    for (std::size_t h = 0; h < num_heads; ++h) {
      const float* qh = qw + h * kv.head_dim;
      const std::size_t kv_head = h / group;
      for (std::size_t j = 0; j <= last; ++j) {
        scratch[j] = dot_kv_row(qh, kv.dtype, kv.key(j, kv_head), kv.key_scale(j, kv_head),
                                kv.head_dim, path) *
                     scale;
      }
      softmax_inplace(scratch, last + 1);
      float* row = scores + kv_head * slots;
      for (std::size_t j = 0; j <= last; ++j)
        row[j] += scratch[j];
    }
  }
}

namespace {

unsigned char* row_bytes(const MutablePagedKv& kv, std::size_t slot, std::size_t kv_head,
                         bool value) {
  const std::size_t eb = kv_element_bytes(kv.dtype);
  auto* page = static_cast<unsigned char*>(kv.pages[slot / kv.page_size]);
  const std::size_t head = (value ? kv.num_kv_heads : 0) + kv_head;
  return page + (head * kv.page_size + slot % kv.page_size) * kv.head_dim * eb;
}

float* scale_of(const MutablePagedKv& kv, std::size_t slot, std::size_t kv_head, bool value) {
  auto* page = static_cast<unsigned char*>(kv.pages[slot / kv.page_size]);
  auto* scales = reinterpret_cast<float*>(page + kv.scales_offset);
  const std::size_t head = (value ? kv.num_kv_heads : 0) + kv_head;
  return scales + head * kv.page_size + slot % kv.page_size;
}

}  // namespace

void compact_kv_head(const MutablePagedKv& kv, std::size_t kv_head, const int* kept,
                     std::size_t count) {
  const std::size_t row = kv.head_dim * kv_element_bytes(kv.dtype);
  const bool scaled = kv_dtype_scaled(kv.dtype);
  for (std::size_t i = 0; i < count; ++i) {
    const auto from = static_cast<std::size_t>(kept[i]);
    if (from == i) continue;
    for (const bool value : {false, true}) {
      std::memcpy(row_bytes(kv, i, kv_head, value), row_bytes(kv, from, kv_head, value), row);
      if (scaled) *scale_of(kv, i, kv_head, value) = *scale_of(kv, from, kv_head, value);
    }
  }
}

}  // namespace weft::cpu
