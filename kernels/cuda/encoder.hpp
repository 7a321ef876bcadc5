#pragma once
// The blocks of an encoder-only forward pass (BERT, RoBERTa) that the decoder's kernels do not
// cover: attention in both directions over whole sequences packed end to end (no KV pages:
// an encoder reads its keys and values straight from the step's qkv product), and the
// post-norm of BERT's residual stream, whose normalized value is the next residual.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/precision.hpp"

namespace weft::cuda {

// Consecutive query tokens of one sequence, at most kEncoderTileQueries of them, with the
// bounds of the sequence they belong to (every token of it is a key).
struct EncoderTile {
  std::int32_t first_query = 0;
  std::int32_t queries = 0;
  std::int32_t sequence_begin = 0;
  std::int32_t sequence_length = 0;
};
inline constexpr int kEncoderTileQueries = 16;
inline constexpr int kEncoderMaxHeadDim = 256;

struct EncoderAttentionArgs {
  // [tokens, 3 * num_heads * head_dim] fp32 rows of stride qkv_stride: q heads, k heads, v heads.
  const float* qkv = nullptr;
  int qkv_stride = 0;
  const float* qkv_bias = nullptr;  // [3 * num_heads * head_dim], or null
  int num_heads = 0;
  int head_dim = 0;  // 1..kEncoderMaxHeadDim
  float scale = 1.0f;
  void* out = nullptr;  // [tokens, num_heads * head_dim] in `precision`
  Precision precision = Precision::kBF16;
};

// out[t, h] = softmax(q_t . k_j * scale over every j of t's sequence) . v, for the queries of
// `tiles` ([num_tiles] on the device). One block per (tile, head): the tile's queries are
// staged once, the sequence's keys and values in chunks of 32 through shared memory, and each
// warp keeps an online softmax (fp32) for its queries. Biases are added as the rows are read.
void encoder_attention(const EncoderAttentionArgs& args, const EncoderTile* tiles, int num_tiles,
                       cudaStream_t stream);

// residual[r] = LayerNorm(residual[r] + delta[r] + delta_bias) * weight + bias (delta and
// delta_bias may be null), written back as fp32 and, when out is not null, also as the
// `precision` input of the next product. fp32 throughout, as transformers' LayerNorm.
void encoder_post_norm(float* residual, const float* delta, const float* delta_bias, int rows,
                       int n, const float* weight, const float* bias, float eps, void* out,
                       Precision precision, cudaStream_t stream);

}  // namespace weft::cuda
