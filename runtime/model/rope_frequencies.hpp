#pragma once
// The inverse frequencies of rotary embedding under each rope_scaling variant, computed the
// way transformers' modeling_rope_utils does so logits match it.

#include <vector>

#include "runtime/model/model_spec.hpp"

namespace weft::model {

struct RopeFrequencies {
  std::vector<float> inv_freq;    // [rotary_dim / 2]
  float attention_factor = 1.0f;  // multiplies cos and sin (yarn)
};

// seq_len is the sequence's length after this step (largest position + 1); only dynamic NTK
// and longrope scaling depend on it: dynamic once it exceeds max_position_embeddings,
// longrope once it exceeds original_max_position_embeddings.
RopeFrequencies rope_frequencies(const RopeSpec& rope, int rotary_dim, int seq_len);

}  // namespace weft::model
