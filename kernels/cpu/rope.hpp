#pragma once
// Rotary position embedding (Su et al. 2021) applied in place to the heads of one token.
// The caller computes the angles (position * inverse frequency, which is where the scaling
// variants differ); this kernel only rotates.

#include <cstddef>

namespace weft::cpu {

// kHalfSplit pairs x[i] with x[i + rotary_dim/2] (GPT-NeoX, transformers' rotate_half);
// kInterleaved pairs x[2i] with x[2i + 1] (GPT-J, Meta's reference Llama).
enum class RopePairing { kHalfSplit, kInterleaved };

// x is [heads, head_dim]; the first rotary_dim entries of each head rotate by the angles
// whose cos and sin are given ([rotary_dim / 2] each, already multiplied by any attention
// factor); the rest pass through unchanged.
void apply_rope(float* x, std::size_t heads, std::size_t head_dim, std::size_t rotary_dim,
                const float* cos, const float* sin, RopePairing pairing) noexcept;

}  // namespace weft::cpu
