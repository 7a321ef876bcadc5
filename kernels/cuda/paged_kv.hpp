#pragma once
// How kernels see the device KV pool and the step's flat batch. The pool has the CPU
// KvCache's layout (runtime/model/kv_cache.hpp): page after page, each page holding per layer
// K [num_kv_heads][page_size][head_dim] then V in the same shape, in the model's 16-bit type
// or, for int8/fp8 pages, one byte per element followed by K's and V's scales
// ([num_kv_heads][page_size] fp32 each; kernels/kv_dtype.hpp says how they are chosen).

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/precision.hpp"
#include "kernels/kv_dtype.hpp"

namespace weft::cuda {

struct PagedKvView {
  void* pool = nullptr;  // first page
  // The attention output's type, and the elements' where dtype is kBF16 or kF16.
  Precision precision = Precision::kBF16;
  std::size_t page_elems = 0;    // elements per page (every layer; bytes for int8/fp8)
  std::size_t layer_offset = 0;  // elements from a page's start to this layer's K block
  int page_size = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  // kInt8 or kFp8E4M3: quantized pages; any other: elements in `precision`.
  KvDtype dtype = KvDtype::kBF16;
  std::size_t scales_offset = 0;  // int8/fp8: bytes from a layer's K block to its K scales
};

// Device arrays describing the step's tokens; all int32.
struct FlatBatchView {
  const std::int32_t* positions = nullptr;         // [tokens]
  const std::int32_t* token_seq = nullptr;         // [tokens] index of the token's sequence
  const std::int32_t* page_table_begin = nullptr;  // [sequences] offset into page_ids
  const std::int32_t* page_ids = nullptr;          // every sequence's page table, concatenated
  int num_tokens = 0;
  // Token trees (speculative verification, SequenceSlice::tree_parent; kernels/cuda/
  // tree_slots.cuh): where tree_from is set, token t's positions p >= tree_from[t] live in
  // slot tree_slots[tree_slot_begin[t] + p - tree_from[t]] of its page table (its ancestors'
  // slots and its own, by depth) instead of slot p; tree_from[t] is INT32_MAX for a token
  // outside a tree. Read by rope_store_kv and decode_attention only.
  const std::int32_t* tree_from = nullptr;
  const std::int32_t* tree_slot_begin = nullptr;
  const std::int32_t* tree_slots = nullptr;
};

}  // namespace weft::cuda
