#pragma once
// The CPU reference of cuda::encoder_attention (kernels/cuda/encoder.hpp): attention in both
// directions over sequences packed end to end, reading q, k and v from one fused product.
// Plain fp32 loops, for tests; the CPU encoder itself attends through paged_attention.

#include <cstddef>
#include <vector>

namespace weft::cpu {

// qkv: [tokens, qkv_stride] rows holding q heads, then k heads, then v heads
// (num_heads * head_dim each); qkv_bias: [3 * num_heads * head_dim] or null; lengths: the
// tokens of each sequence, in order (summing to the rows of qkv). out: [tokens, num_heads *
// head_dim].
void encoder_attention(const float* qkv, std::size_t qkv_stride, const float* qkv_bias,
                       const std::vector<int>& lengths, int num_heads, int head_dim, float scale,
                       float* out);

}  // namespace weft::cpu
