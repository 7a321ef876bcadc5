#pragma once
// The per-split decode attention (decode_attention_split.cu, and the CUDA-core kernels of
// decode_attention_split_cuda_core.cu), which decode_attention (paged_attention.hpp) runs when
// DecodeAttentionKernel::kSplit is selected and for the shapes the pipelined and streaming
// kernels do not serve. Internal to kernels/cuda: callers go through decode_attention.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/paged_kv.hpp"

namespace weft::cuda::detail {

// Grid depth: no token of context up to max_context needs more splits than this.
inline int decode_splits(int max_context) {
  return std::min(kMaxDecodeSplits, (max_context + kDecodeSplitQuantum - 1) / kDecodeSplitQuantum);
}

// Whether the tensor-core per-split kernel serves head_dim with `group` query heads per kv head
// (16-bit pages; it also applies the rotary embedding, decode_attention_applies_rope).
bool decode_split_tc_supports(int head_dim, int group);

// Let the per-split kernels (prepare_decode_split: the tensor-core kernel; the other: the
// CUDA-core ones) use `bytes` of shared memory per block (the opt-in maximum); called once by
// prepare_attention_kernels.
void prepare_decode_split(int bytes);
void prepare_decode_split_cuda_core(int bytes);

// decode_attention's work on the per-split kernels: decode_splits(max_context) splits per
// token, then the combine where there is more than one; `workspace` holds
// decode_workspace_floats(...) floats.
void decode_attention_split(const AttentionArgs& args, const FlatBatchView& batch,
                            const PagedKvView& kv, const std::int32_t* query_tokens,
                            int num_queries, int max_context, float* workspace,
                            cudaStream_t stream);

// The CUDA-core kernel over `grid` (kv heads, queries, splits), for what the tensor-core kernel
// does not serve (int8/fp8 pages, head_dim 32, other shapes); decode_attention_split launches
// it and then the combine.
void decode_attention_split_cuda_core(const AttentionArgs& args, const FlatBatchView& batch,
                                      const PagedKvView& kv, const std::int32_t* query_tokens,
                                      dim3 grid, float* workspace, cudaStream_t stream);

}  // namespace weft::cuda::detail
