#pragma once
// The streaming tensor-core decode attention (decode_attention_stream.cu), which
// decode_attention (paged_attention.hpp) runs for 16-bit and int8/fp8 pages, head_dim 64, 128
// or 256 and up to 8 query heads per kv head when DecodeAttentionKernel::kStream is selected
// (WEFT_DECODE_ATTN=stream). Internal to kernels/cuda: callers go through decode_attention.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/paged_kv.hpp"

namespace weft::cuda::detail {

// Whether the streaming kernel serves this shape.
bool decode_stream_supports(int num_heads, int num_kv_heads, int head_dim, KvDtype dtype);

// Lets its kernels use `bytes` of shared memory per block (the opt-in maximum) and fills the
// occupancy cache; called once by prepare_attention_kernels (outside any stream capture).
void prepare_decode_stream(int bytes);

// decode_attention's work for a shape decode_stream_supports; `workspace` holds
// decode_workspace_floats(...) floats, as for the other decode kernels.
void decode_attention_stream(const AttentionArgs& args, const FlatBatchView& batch,
                             const PagedKvView& kv, const std::int32_t* query_tokens,
                             int num_queries, int max_context, float* workspace,
                             cudaStream_t stream);

// The launch the streaming kernel makes for `num_queries` tokens (kv_heads each) whose longest
// context is max_context: positions per segment of the longest context (the unit whose result
// is folded in order; fixed per context, so results do not depend on the batch), parts (the
// grid's depth, chosen from the batch and the device: each token's segments are cut into at
// most this many runs of consecutive segments, one block each), segments per part of the
// longest context, and ring stages per warp (deeper for int8/fp8 pages, `dtype`, whose tiles
// are half the bytes). For the bench and the tests.
struct DecodeStreamLaunch {
  int segment_keys = 0;
  int segments_per_part = 0;
  int parts = 0;
  int stages = 0;
  int blocks_per_sm = 0;
};
DecodeStreamLaunch decode_stream_launch(int num_heads, int num_kv_heads, int head_dim,
                                        int num_queries, int max_context,
                                        KvDtype dtype = KvDtype::kBF16, int segment_keys = 0);

// The segment a launch asking for `asked` positions (AttentionArgs::segment_keys) uses at
// least: `asked` when it is a multiple of 64 from 64 to 4096, else the process's
// (WEFT_DECODE_STREAM_SEGMENT_KEYS, 256 unset).
int stream_segment_keys(int asked);

// A reference for the benches, not attention: reads every key and value row that
// decode_attention would read for these tokens (same pages, same page-table lookups, 16-byte
// loads, many in flight per thread) and folds them into one word per block written to
// `sink` ([num_queries * num_kv_heads] words), so its time is what reading the KV costs with
// this pool layout, the ceiling for any decode attention kernel.
void decode_kv_read(const FlatBatchView& batch, const PagedKvView& kv,
                    const std::int32_t* query_tokens, int num_queries, unsigned* sink,
                    cudaStream_t stream);

}  // namespace weft::cuda::detail
