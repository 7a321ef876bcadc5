#pragma once
// Attention with ALiBi (Press et al. 2022; BLOOM): softmax(q . k * scale + slope_h * (j - i))
// over the token's causal context in the KV pages, for every token of the step (prefill and
// decode alike). A plain CUDA-core kernel: one block per (token, head), each warp an online
// softmax over every fourth key, merged at the end. The rope kernels of paged_attention.hpp
// are tuned for rope models; ALiBi models (BLOOM, MPT) are served by this one.

#include <cuda_runtime_api.h>

#include "kernels/cuda/paged_attention.hpp"

namespace weft::cuda {

// args as for decode_attention (q fp32 with its stride, num_heads, scale, sliding_window, out
// in kv.precision); slopes: [num_heads] fp32 on the device. head_dim up to 256.
void alibi_attention(const AttentionArgs& args, const float* slopes, const FlatBatchView& batch,
                     const PagedKvView& kv, cudaStream_t stream);

}  // namespace weft::cuda
