#pragma once
// Attention of one token's query heads over keys and values in pages (the PagedKv layout of
// paged_attention.hpp) with an additive bias per (head, key): T5's relative position biases,
// and the plain bidirectional and cross-attention of encoder-decoder networks (no bias). The
// causal or bidirectional extent is the caller's choice of [first_pos, last_pos].

#include <cstddef>

#include "kernels/cpu/paged_attention.hpp"

namespace weft::cpu {

// out[h] = softmax_j(q[h] . K[j] * scale + bias[h * span + (j - first_pos)]) V[j] over
// j in [first_pos, last_pos], span = last_pos - first_pos + 1. q and out are
// [num_heads, head_dim]; bias is [num_heads][span] or null (no bias); scratch holds span
// floats. Grouped-query heads map as in paged_attention.
void biased_attention(const float* q, std::size_t num_heads, const PagedKv& kv,
                      std::size_t first_pos, std::size_t last_pos, float scale, const float* bias,
                      float* out, float* scratch, KernelPath path = KernelPath::kAuto);

}  // namespace weft::cpu
