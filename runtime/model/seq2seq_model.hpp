#pragma once
// An encoder-decoder transformer (T5, M2M100/NLLB) assembled from a ModelSpec whose network is
// kEncoderDecoder, with a CPU forward pass in two parts:
//
//  - encode: each new sequence's source tokens run through the encoder stack (bidirectional
//    attention, T5's relative biases or M2M100's sinusoidal positions), and every decoder
//    layer's cross-attention keys and values are computed once from the result and stored in
//    pages of the KV pool that the sequence owns (its CrossAttentionSlice), beside its
//    self-attention pages;
//  - decode: a step of the decoder over a StepBatch as decoder-only models run it (causal
//    self-attention over paged KV, positions counting decoder tokens from 0), plus
//    cross-attention of each token over its sequence's cross pages.
//
// Both batch several sequences in one pass. The KV layout is the decoder's (its layers, heads
// and head_dim); cross pages use the same layout, position j of a sequence's cross pages
// holding encoder token j. Pages are the caller's: it allocates them and frees them with the
// sequence (Seq2SeqSequence in seq2seq_session.hpp does so for a KvCache).

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "runtime/model/encoder_model.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/model_spec.hpp"
#include "runtime/model/step_batch.hpp"
#include "weft/error.hpp"
#include "weft/tensor.hpp"

namespace weft::model {

// One sequence's encoder output as cross-attention keys and values.
struct CrossAttentionSlice {
  // Page ids covering encoder positions [0, length): position j in page_table[j / page_size].
  std::vector<std::int32_t> page_table;
  int length = 0;  // encoder tokens
};

class Seq2SeqModel {
 public:
  // Binds and checks every tensor: present, a float dtype, the shape the spec implies. Errors
  // name the file, the tensor and the shape.
  static Result<Seq2SeqModel> create(const ModelSpec& spec, const WeightLookup& weights);

  const ModelSpec& spec() const noexcept { return spec_; }
  // The decoder's KV layout (self- and cross-attention pages alike).
  KvLayout kv_layout(int page_size) const;
  int decoder_start_token_id() const noexcept { return spec_.seq2seq.decoder_start_token_id; }

  // Runs the encoder over each sequence of `batch` (packed, token_types ignored) and writes
  // its cross-attention keys and values for every decoder layer into cross[s]'s pages
  // (cross[s].length must equal the sequence's length). `hidden`, when given, receives the
  // encoder's last hidden states ([tokens, hidden_size], after its final norm). Bad input (a
  // token outside the vocabulary, an empty sequence, pages that do not cover it) is an error
  // naming the sequence.
  Result<void> encode(const EncodeBatch& batch, const std::vector<CrossAttentionSlice>& cross,
                      KvCache& kv, cpu::ThreadPool& pool,
                      cpu::KernelPath path = cpu::KernelPath::kAuto,
                      std::vector<float>* hidden = nullptr) const;

  // One decoder step: writes the new tokens' self-attention keys and values into their pages
  // and fills `logits` with batch.logit_rows() rows of vocab_size floats. cross[s] is
  // batch.sequences[s]'s encoder output, written by encode.
  Result<void> decode(const StepBatch& batch, const std::vector<CrossAttentionSlice>& cross,
                      KvCache& kv, std::vector<float>& logits, cpu::ThreadPool& pool,
                      cpu::KernelPath path = cpu::KernelPath::kAuto) const;

  struct Norm {
    std::vector<float> weight, bias;  // bias empty for rms norms and bias-free layer norms
  };
  struct Attention {
    cpu::WeightMatrix q, k, v, o;
    std::vector<float> q_bias, k_bias, v_bias, o_bias;
  };
  struct Mlp {
    cpu::WeightMatrix gate, up, down;  // gate unset for an ungated MLP
    std::vector<float> gate_bias, up_bias, down_bias;
  };
  struct EncoderLayer {
    Norm attn_norm, mlp_norm;
    Attention attn;
    Mlp mlp;
  };
  struct DecoderLayer {
    Norm attn_norm, cross_norm, mlp_norm;
    Attention self, cross;
    Mlp mlp;
  };

  // The bound weights, for backends that copy them elsewhere (the CUDA model).
  const TensorView& embedding() const noexcept { return embedding_; }
  const cpu::WeightMatrix& lm_head() const noexcept { return lm_head_; }
  const Norm& encoder_final_norm() const noexcept { return encoder_final_norm_; }
  const Norm& decoder_final_norm() const noexcept { return decoder_final_norm_; }
  const std::vector<float>& encoder_relative_bias() const noexcept {
    return encoder_relative_bias_;
  }
  const std::vector<float>& decoder_relative_bias() const noexcept {
    return decoder_relative_bias_;
  }
  const std::vector<EncoderLayer>& encoder_layers() const noexcept { return encoder_layers_; }
  const std::vector<DecoderLayer>& decoder_layers() const noexcept { return decoder_layers_; }

 private:
  Result<void> check_cross(const std::vector<CrossAttentionSlice>& cross, std::size_t sequences,
                           const KvCache& kv) const;
  void normalize(const Norm& n, const float* x, std::size_t tokens, float* out,
                 cpu::KernelPath path) const;
  void mlp(const Mlp& m, std::size_t intermediate, const float* x, std::size_t tokens, float* out,
           cpu::ThreadPool& pool, cpu::KernelPath path) const;
  // x[t] = embedding[tokens[t]] * scale (+ sinusoidal row of positions[t]).
  void embed(const std::int32_t* tokens, const std::int32_t* positions, std::size_t count, float* x,
             cpu::KernelPath path) const;
  float attention_scale(int head_dim) const;

  ModelSpec spec_;
  TensorView embedding_;
  cpu::WeightMatrix lm_head_;
  Norm encoder_final_norm_, decoder_final_norm_;
  // T5's relative attention biases, [num_buckets][heads] (empty without them).
  std::vector<float> encoder_relative_bias_, decoder_relative_bias_;
  std::vector<EncoderLayer> encoder_layers_;
  std::vector<DecoderLayer> decoder_layers_;
  std::vector<std::shared_ptr<const void>> owners_;  // keep mapped weights alive
};

}  // namespace weft::model
