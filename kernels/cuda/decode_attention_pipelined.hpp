#pragma once
// The pipelined tensor-core decode attention (decode_attention.cu), which decode_attention
// (paged_attention.hpp) runs for 16-bit pages, head_dim 64, 128 or 256 and up to 8 query
// heads per kv head when DecodeAttentionKernel::kPipelined is selected. Internal to
// kernels/cuda: callers go through decode_attention.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/paged_kv.hpp"

namespace weft::cuda::detail {

// Whether the pipelined kernel serves this shape.
bool decode_pipelined_supports(int num_heads, int num_kv_heads, int head_dim, KvDtype dtype);

// Lets its kernels use `bytes` of shared memory per block (the opt-in maximum); called once by
// prepare_attention_kernels.
void prepare_decode_pipelined(int bytes);

// decode_attention's work for a shape decode_pipelined_supports; `workspace` holds
// decode_workspace_floats(...) floats, as for the other decode kernels.
void decode_attention_pipelined(const AttentionArgs& args, const FlatBatchView& batch,
                                const PagedKvView& kv, const std::int32_t* query_tokens,
                                int num_queries, int max_context, float* workspace,
                                cudaStream_t stream);

}  // namespace weft::cuda::detail
