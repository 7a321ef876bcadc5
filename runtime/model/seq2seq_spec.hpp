#pragma once
// The blocks only encoder-decoder networks (T5, M2M100/NLLB) have: an encoder stack of its own
// size, cross-attention in every decoder layer, T5's relative position buckets, M2M100's
// sinusoidal positions with their padding offset, the attention and lm-head scales these
// families use. Read from a spec file's "encoder_decoder" section and the "encoder" and
// "cross_attention" objects of its "tensors" (docs/model-spec.md) into ModelSpec::seq2seq. The
// rest of the ModelSpec (layers, heads, MLP width) describes the decoder.

#include <string>
#include <vector>

namespace weft::model {

struct Seq2SeqSpec {
  int encoder_layers = 0;
  int encoder_heads = 0;
  int encoder_head_dim = 0;
  int encoder_intermediate_size = 0;

  // T5's relative position buckets (PositionEmbedding::kRelativeBuckets): half the buckets per
  // direction in the encoder, all of them for the past in the decoder; exact below half of
  // those, logarithmic up to max_distance (Raffel et al. 2020).
  int relative_buckets = 32;
  int relative_max_distance = 128;

  // Sinusoidal positions (PositionEmbedding::kSinusoidal, M2M100's): token i of a sequence reads
  // row padding_idx + 1 + i; a token equal to padding_idx reads the zero row padding_idx.
  int position_padding_idx = 1;

  // Attention logits are q.k * attention_scale: 0 means 1/sqrt(head_dim) of the stack (the
  // encoder's and the decoder's may differ, M2M100); T5 1.
  double attention_scale = 0.0;
  // The decoder's last (normalized) hidden state is multiplied by this before the lm head:
  // T5 with tied embeddings d_model^-0.5, others 1.
  double lm_head_scale = 1.0;
  int decoder_start_token_id = 0;

  // Encoder tensors (per layer "{layer}"): its norms, q/k/v/o, MLP and final norm.
  std::string encoder_attn_norm, encoder_q, encoder_k, encoder_v, encoder_o;
  std::string encoder_mlp_norm, encoder_gate, encoder_up, encoder_down, encoder_final_norm;
  // T5's [num_buckets, heads] bias tables (layer 0 of each stack, shared by its layers).
  std::string encoder_relative_bias, decoder_relative_bias;
  // The decoder's cross-attention per layer: the norm before it, q/k/v/o.
  std::string cross_norm, cross_q, cross_k, cross_v, cross_o;
  // Where a checkpoint may keep the shared token embedding when the main name is absent
  // (tied copies saved under the encoder's or decoder's name), tried in order.
  std::vector<std::string> embedding_fallbacks;
};

}  // namespace weft::model
