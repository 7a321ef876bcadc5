#pragma once
// Rotary embedding (Su et al. 2021) of the step's queries and keys, fused with the qkv bias
// and with writing each token's key and value into its KV page slot. The scaling variants
// (default, linear, dynamic NTK, llama3, yarn) differ only in the inverse frequencies and the
// attention factor, which the host computes with runtime/model/rope_frequencies and uploads;
// so this one kernel serves them all.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/paged_kv.hpp"

namespace weft::cuda {

struct RopeArgs {
  // [tokens, (num_heads + 2 * num_kv_heads) * head_dim] fp32, straight from the qkv product:
  // q heads, then k heads, then v heads. The bias is added and q rotated in place.
  float* qkv = nullptr;
  const float* qkv_bias = nullptr;  // [(num_heads + 2 * num_kv_heads) * head_dim] or null
  int num_heads = 0;
  // 0: no rotary embedding (the keys and values are still stored).
  int rotary_dim = 0;
  bool interleaved = false;  // pairs (2i, 2i+1) instead of (i, i + rotary_dim/2)
  // [sequences][rotary_dim / 2] inverse frequencies and [sequences] factors multiplying cos
  // and sin: per sequence because dynamic NTK scaling depends on the sequence's length.
  const float* inv_freq = nullptr;
  const float* attention_factor = nullptr;
  // [tokens] the positions the angles are taken at; null: batch.positions. After a KV-Compress
  // eviction the batch's positions are slots (position - the sequence's slot offset) and these
  // the tokens' own positions (runtime/model/cuda/cuda_kv_compress.hpp).
  const std::int32_t* positions = nullptr;
};

// For each token: qkv += bias; rotate the first rotary_dim entries of every q and k head by
// angle position * inv_freq (fp32 product, as torch forms it); write k and v into the page
// slot of the token's batch position in kv's layer.
void rope_store_kv(const RopeArgs& args, const FlatBatchView& batch, const PagedKvView& kv,
                   cudaStream_t stream);

}  // namespace weft::cuda
