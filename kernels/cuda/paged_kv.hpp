#pragma once
// How kernels see the device KV pool and the step's flat batch. The pool has the CPU
// KvCache's layout (runtime/model/kv_cache.hpp) in a 16-bit type: page after page, each page
// holding per layer K [num_kv_heads][page_size][head_dim] then V in the same shape.

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/precision.hpp"

namespace weft::cuda {

struct PagedKvView {
  void* pool = nullptr;  // first page, 16-bit elements
  Precision precision = Precision::kBF16;
  std::size_t page_elems = 0;    // elements per page (every layer)
  std::size_t layer_offset = 0;  // elements from a page's start to this layer's K block
  int page_size = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
};

// Device arrays describing the step's tokens; all int32.
struct FlatBatchView {
  const std::int32_t* positions = nullptr;         // [tokens]
  const std::int32_t* token_seq = nullptr;         // [tokens] index of the token's sequence
  const std::int32_t* page_table_begin = nullptr;  // [sequences] offset into page_ids
  const std::int32_t* page_ids = nullptr;          // every sequence's page table, concatenated
  int num_tokens = 0;
};

}  // namespace weft::cuda
