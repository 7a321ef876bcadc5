#include "kernels/cpu/rope.hpp"

namespace weft::cpu {

void apply_rope(float* x, std::size_t heads, std::size_t head_dim, std::size_t rotary_dim,
                const float* cos, const float* sin, RopePairing pairing) noexcept {
  const std::size_t half = rotary_dim / 2;
  for (std::size_t h = 0; h < heads; ++h) {
    float* v = x + h * head_dim;
    for (std::size_t i = 0; i < half; ++i) {
      const std::size_t a = pairing == RopePairing::kHalfSplit ? i : 2 * i;
      const std::size_t b = pairing == RopePairing::kHalfSplit ? i + half : 2 * i + 1;
      const float x0 = v[a];
      const float x1 = v[b];
      v[a] = x0 * cos[i] - x1 * sin[i];
      v[b] = x1 * cos[i] + x0 * sin[i];
    }
  }
}

}  // namespace weft::cpu
