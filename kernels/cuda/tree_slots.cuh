#pragma once
// Where a token's keys and values live in its sequence's page table (nvcc only). Outside a
// token tree, position p is slot p. A tree node (FlatBatchView::tree_from) sees the context
// at slots [0, tree_from) as positions [0, tree_from), and its ancestors and itself, at
// positions tree_from, tree_from + 1, ..., pos, at the slots its tree gave them (the scratch
// slots after the context): so a decode query of a tree node walks positions [first, pos] as
// plain decode of that path would, with the same split of the context and the same order of
// every sum, and only the addresses of its path's rows differ.

#include <climits>
#include <cstdint>

#include "kernels/cuda/paged_kv.hpp"

namespace weft::cuda {

struct SlotTable {
  const std::int32_t* pages = nullptr;  // the sequence's page table
  const std::int32_t* tail = nullptr;   // slots of positions >= from
  int from = INT_MAX;

  __device__ __forceinline__ int slot(int p) const { return p < from ? p : tail[p - from]; }
};

// Token t's view of its sequence's page table.
__device__ __forceinline__ SlotTable slot_table(const FlatBatchView& b, int t) {
  SlotTable st;
  st.pages = b.page_ids + b.page_table_begin[b.token_seq[t]];
  if (b.tree_from != nullptr) {
    st.from = b.tree_from[t];
    if (st.from != INT_MAX) st.tail = b.tree_slots + b.tree_slot_begin[t];
  }
  return st;
}

}  // namespace weft::cuda
