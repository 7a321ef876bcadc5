#pragma once
// The two position blocks of encoder-decoder networks: T5's relative position buckets and
// M2M100's sinusoidal table, computed the way transformers computes them (fp32 where it uses
// fp32, so bucket boundaries and table entries match).

#include <cstddef>

namespace weft::model {

// T5's bucket of a key at `relative_position` = key position - query position (Raffel et al.
// 2020; transformers' T5Attention._relative_position_bucket). Bidirectional (the encoder): half
// the buckets for keys after the query, half for the rest. Causal (the decoder): all buckets
// for keys at or before the query (later keys count as distance 0). Within a direction,
// distances below half the buckets get one bucket each; longer ones share logarithmically
// sized buckets up to max_distance; everything beyond falls into the last bucket.
int relative_position_bucket(int relative_position, bool bidirectional, int num_buckets,
                             int max_distance) noexcept;

// Row `row` of M2M100's sinusoidal table (transformers'
// M2M100SinusoidalPositionalEmbedding.get_embedding) into out[0, dim): with half = dim / 2 and
// f_j = exp(-j ln(10000) / (half - 1)), sin(row f_j) for j < half, then cos(row f_j); a zero
// in the last entry when dim is odd; all zeros for row == padding_idx (pass -1 for none).
void sinusoidal_position(int row, std::size_t dim, int padding_idx, float* out) noexcept;

}  // namespace weft::model
