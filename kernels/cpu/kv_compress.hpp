#pragma once
// The two kernels of KV-Compress on the CPU (runtime/kv/kv_compress.hpp has the policy):
// scoring a sequence's cached slots by the attention its observation window paid them, and
// moving each kv head's surviving rows to the front of the sequence's pages.

#include <cstddef>

#include "kernels/cpu/paged_attention.hpp"

namespace weft::cpu {

// scores[kv_head * slots + j] = the sum, over the window's queries and over the query heads
// of kv_head's group, of the softmax attention weight that query paid to slot j. The window's
// queries are the sequence's last `window` tokens, at slots slots - window .. slots - 1, each
// attending causally to slots [0, its own slot]. q: [window][num_heads * head_dim], rotated
// as the attention kernel gets them. scratch holds `slots` floats.
void window_attention_scores(const float* q, std::size_t window, std::size_t num_heads,
                             const PagedKv& kv, std::size_t slots, float scale, float* scores,
                             float* scratch, KernelPath path = KernelPath::kAuto);

// One layer's pages of a sequence, writable: the layout of PagedKv.
struct MutablePagedKv {
  void* const* pages = nullptr;
  std::size_t page_size = 0;
  std::size_t num_kv_heads = 0;
  std::size_t head_dim = 0;
  KvDtype dtype = KvDtype::kF32;
  std::size_t scales_offset = 0;

  PagedKv view() const {
    return {reinterpret_cast<const void* const*>(pages),
            page_size,
            num_kv_heads,
            head_dim,
            dtype,
            scales_offset};
  }
};

// Moves kv_head's rows kept[0..count) (ascending slots) to slots 0..count-1, K and V with
// their scales, in order (kept[i] >= i, so no row is overwritten before it moves). Slots from
// count on keep stale rows that nothing reads.
void compact_kv_head(const MutablePagedKv& kv, std::size_t kv_head, const int* kept,
                     std::size_t count);

}  // namespace weft::cpu
