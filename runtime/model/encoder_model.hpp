#pragma once
// An encoder-only transformer (BERT, RoBERTa, XLM-R) assembled from a ModelSpec whose network
// is kEncoderOnly, with a CPU forward pass. Every sequence of a batch is run whole in one pass
// (prefill only, no KV cache: nothing is generated), each token attending to every token of
// its own sequence. The result is the last hidden states, or one pooled vector per sequence.

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/model_spec.hpp"
#include "weft/error.hpp"
#include "weft/tensor.hpp"

namespace weft::model {

// Sequences packed end to end, no padding.
struct EncodeBatch {
  std::vector<std::int32_t> tokens;
  std::vector<std::int32_t> token_types;  // one per token; empty: all type 0
  std::vector<int> lengths;               // tokens of each sequence, in order
};

class EncoderModel {
 public:
  // Binds and checks every tensor: present (under one of the spec's tensor prefixes), a float
  // dtype, the shape the spec implies. Errors name the file, the tensor and the shape.
  static Result<EncoderModel> create(const ModelSpec& spec, const WeightLookup& weights);

  const ModelSpec& spec() const noexcept { return spec_; }
  // The longest sequence the position table holds.
  int max_sequence_length() const noexcept {
    return spec_.encoder.max_position_embeddings - spec_.encoder.position_offset;
  }
  // The prefix the checkpoint's tensors were found under ("" or e.g. "bert.").
  const std::string& tensor_prefix() const noexcept { return prefix_; }

  // Fills `hidden` with the last hidden states, [tokens, hidden_size]. A token outside the
  // vocabulary, a token type outside the type table, an empty or over-long sequence, or
  // lengths that do not cover the tokens is an error naming the sequence.
  Result<void> encode(const EncodeBatch& batch, std::vector<float>& hidden, cpu::ThreadPool& pool,
                      cpu::KernelPath path = cpu::KernelPath::kAuto) const;

  // encode, then one pooled vector per sequence.
  Result<std::vector<std::vector<float>>> embed(
      const EncodeBatch& batch, Pooling pooling, bool normalize, cpu::ThreadPool& pool,
      cpu::KernelPath path = cpu::KernelPath::kAuto) const;

  // What a device backend uploads: the tables (type_embedding's data is null when the model
  // has none) and the embedding norm (empty when it has none).
  const TensorView& word_embedding() const noexcept { return word_embedding_; }
  const TensorView& position_embedding() const noexcept { return position_embedding_; }
  const TensorView& type_embedding() const noexcept { return type_embedding_; }
  const std::vector<float>& embedding_norm() const noexcept { return embedding_norm_; }
  const std::vector<float>& embedding_norm_bias() const noexcept { return embedding_norm_bias_; }

  // The checks encode() makes before running, for other backends.
  Result<void> check(const EncodeBatch& batch) const;

  struct Layer {
    cpu::WeightMatrix q, k, v, o, up, down;
    std::vector<float> q_bias, k_bias, v_bias, o_bias, up_bias, down_bias;
    std::vector<float> attn_norm, attn_norm_bias, mlp_norm, mlp_norm_bias;
  };
  const std::vector<Layer>& layers() const noexcept { return layers_; }

 private:
  ModelSpec spec_;
  std::string prefix_;
  TensorView word_embedding_, position_embedding_, type_embedding_;
  std::vector<float> embedding_norm_, embedding_norm_bias_;
  std::vector<Layer> layers_;
  std::vector<std::shared_ptr<const void>> owners_;  // keep mapped weights alive
};

// One sequence's pooled vector from its last hidden states ([length, hidden] rows).
std::vector<float> pool_hidden_states(const float* hidden, int length, int hidden_size,
                                      Pooling pooling, bool normalize);

std::string_view to_string(Pooling pooling) noexcept;

}  // namespace weft::model
