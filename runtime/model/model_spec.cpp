#include "runtime/model/model_spec.hpp"

namespace weft::model {

std::optional<std::string> validate(const ModelSpec& s) {
  auto positive = [](int v) { return v > 0; };
  if (!positive(s.vocab_size)) return "vocab_size must be positive";
  if (!positive(s.hidden_size)) return "hidden_size must be positive";
  if (!positive(s.intermediate_size)) return "intermediate_size must be positive";
  if (!positive(s.num_layers)) return "num_layers must be positive";
  if (!positive(s.num_heads)) return "num_heads must be positive";
  if (!positive(s.num_kv_heads)) return "num_kv_heads must be positive";
  if (!positive(s.head_dim)) return "head_dim must be positive";
  if (s.num_heads % s.num_kv_heads != 0) {
    return "num_heads (" + std::to_string(s.num_heads) + ") must be a multiple of num_kv_heads (" +
           std::to_string(s.num_kv_heads) + ")";
  }
  if (s.position == PositionEmbedding::kRope) {
    const int rotary = s.rotary_dim();
    if (rotary <= 0 || rotary % 2 != 0 || rotary > s.head_dim) {
      return "rotary dimension " + std::to_string(rotary) + " (head_dim " +
             std::to_string(s.head_dim) + " x partial_rotary_factor) must be even and positive";
    }
    if (!(s.rope.theta > 0)) return "rope theta must be positive";
    if (s.rope.scaling != RopeScaling::kDefault && !(s.rope.factor > 0)) {
      return "rope scaling factor must be positive";
    }
    if (s.rope.scaling == RopeScaling::kDynamic && s.rope.max_position_embeddings <= 0) {
      return "dynamic rope scaling needs max_position_embeddings";
    }
    if ((s.rope.scaling == RopeScaling::kLlama3 || s.rope.scaling == RopeScaling::kYarn) &&
        s.rope.original_max_position_embeddings <= 0) {
      return "llama3 and yarn rope scaling need original_max_position_embeddings";
    }
    if (s.rope.scaling == RopeScaling::kLlama3 &&
        s.rope.high_freq_factor <= s.rope.low_freq_factor) {
      return "llama3 rope scaling needs high_freq_factor > low_freq_factor";
    }
  }
  if (s.rope.scaling == RopeScaling::kLongrope && s.position == PositionEmbedding::kRope) {
    const auto half = static_cast<std::size_t>(s.rotary_dim() / 2);
    if (s.rope.short_factor.size() != half || s.rope.long_factor.size() != half) {
      return "longrope scaling needs short_factor and long_factor of rotary_dim / 2 (" +
             std::to_string(half) + ") numbers each, got " +
             std::to_string(s.rope.short_factor.size()) + " and " +
             std::to_string(s.rope.long_factor.size());
    }
  }
  // (An encoder-only spec's learned positions are its encoder section's, checked there.)
  if (s.position == PositionEmbedding::kLearned && s.network != Network::kEncoderOnly) {
    if (s.max_positions <= 0) return "learned positions need max_position_embeddings";
    if (s.position_offset < 0) return "the learned position offset must not be negative";
  }
  if (!(s.embedding_scale > 0)) return "embedding_scale must be positive";
  if (s.sliding_window < 0) return "sliding_window must not be negative";
  if (!(s.norm_epsilon > 0)) return "normalization epsilon must be positive";
  return std::nullopt;
}

}  // namespace weft::model
