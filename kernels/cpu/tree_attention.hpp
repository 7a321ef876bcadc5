#pragma once
// Attention of one token's query heads over an explicit, ascending list of KV slots of a
// sequence's pages: the topology-aware causal mask of a token tree (SpecInfer, seed 002). A
// tree node attends to the sequence's committed context and to its own ancestors in the tree
// (itself included), whose keys sit in scratch slots after the context; the caller lists
// exactly those slots. For a chain (every node the child of the one before) the list is the
// contiguous range paged_attention() reads, in the same order, so the results are bitwise the
// same.

#include <cstddef>

#include "kernels/cpu/paged_attention.hpp"

namespace weft::cpu {

// out[h] = softmax(q[h] . K[slots] * scale) V[slots] for every query head h. q and out are
// [num_heads, head_dim]; scratch holds `count` floats; count >= 1.
void tree_attention(const float* q, std::size_t num_heads, const PagedKv& kv,
                    const std::size_t* slots, std::size_t count, float scale, float* out,
                    float* scratch, KernelPath path = KernelPath::kAuto);

}  // namespace weft::cpu
