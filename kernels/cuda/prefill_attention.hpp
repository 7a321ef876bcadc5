#pragma once
// The prefill attention kernels behind prefill_attention (paged_attention.hpp): the CUDA-core
// and WMMA kernels and the choice between the three are in prefill_attention.cu, the mma.sync
// kernel (FlashAttention-2 style; 16-bit pages, head_dim 64 and 128) in
// prefill_attention_mma.cu. Internal to kernels/cuda: callers go through prefill_attention.

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/paged_kv.hpp"

namespace weft::cuda::detail {

// Let the prefill kernels (prepare_prefill_attention: the CUDA-core and WMMA ones; the other:
// the mma.sync one) use `bytes` of shared memory per block (the opt-in maximum); called once
// by prepare_attention_kernels.
void prepare_prefill_attention(int bytes);
void prepare_prefill_attention_mma(int bytes);

// Shared memory of the mma.sync kernel for head_dim D over pages of `dtype` (16-bit or
// int8/fp8), 0 where it does not run.
std::size_t prefill_mma_shared(int D, KvDtype dtype = KvDtype::kBF16);

// prefill_attention's work on the mma.sync kernel (prefill_mma_shared(head_dim, dtype) > 0): a
// block per (query head, tile), `mma_shared` bytes of shared memory each.
void prefill_attention_mma(const AttentionArgs& args, const FlatBatchView& batch,
                           const PagedKvView& kv, const PrefillTile* tiles, int num_tiles,
                           int mma_shared, cudaStream_t stream);

}  // namespace weft::cuda::detail
