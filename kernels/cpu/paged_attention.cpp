#include "kernels/cpu/paged_attention.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/kv_quant.hpp"
#include "kernels/cpu/softmax.hpp"

namespace weft::cpu {

void paged_attention(const float* q, std::size_t num_heads, const PagedKv& kv,
                     std::size_t first_pos, std::size_t last_pos, float scale, float* out,
                     float* scratch, KernelPath path, const float* alibi_slopes) {
  path = resolve(path);
  const std::size_t group = num_heads / kv.num_kv_heads;
  for (std::size_t h = 0; h < num_heads; ++h) {
    const float* qh = q + h * kv.head_dim;
    const std::size_t kv_head = h / group;
    const std::size_t last = last_pos + kv.shift(kv_head);
    const std::size_t span = last - first_pos + 1;
    for (std::size_t j = 0; j < span; ++j) {
      const std::size_t pos = first_pos + j;
      scratch[j] = dot_kv_row(qh, kv.dtype, kv.key(pos, kv_head), kv.key_scale(pos, kv_head),
                              kv.head_dim, path) *
                   scale;
    }
    if (alibi_slopes != nullptr) {
      for (std::size_t j = 0; j < span; ++j) {
        const auto distance = static_cast<float>(first_pos + j) - static_cast<float>(last);
        scratch[j] += alibi_slopes[h] * distance;
      }
    }
    softmax_inplace(scratch, span);
    float* oh = out + h * kv.head_dim;
    std::fill(oh, oh + kv.head_dim, 0.0f);
    for (std::size_t j = 0; j < span; ++j) {
      const std::size_t pos = first_pos + j;
      axpy_kv_row(scratch[j], kv.dtype, kv.value(pos, kv_head), kv.value_scale(pos, kv_head), oh,
                  kv.head_dim, path);
    }
  }
}

}  // namespace weft::cpu
