#pragma once
// A decoder-only transformer assembled from a ModelSpec and a set of weights, with a CPU
// forward pass over a StepBatch. Weight matrices stay where the loader mapped them (f32, f16
// or bf16, or a block quantization format: docs/quantization.md); norms and biases are
// widened to f32 once at creation.

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/model_spec.hpp"
#include "runtime/model/step_batch.hpp"
#include "runtime/parallel/communicator.hpp"
#include "weft/error.hpp"
#include "weft/tensor.hpp"

namespace weft::model {

// Where weights come from. `find` returns nullptr for an absent tensor; `origin` names the
// file holding a tensor and `where` the checkpoint as a whole, for error messages.
struct WeightLookup {
  std::function<const TensorView*(const std::string&)> find;
  std::function<std::string(const std::string&)> origin;
  std::string where;
  // The format of the quantized matrices among these tensors (kNone: there are none). A
  // quantized [rows, cols] matrix is a U8 tensor of [rows, quant::row_bytes(format, cols)];
  // matrices in f32, f16 or bf16 beside them load as usual.
  quant::QuantType quantized = quant::QuantType::kNone;
};

// The tensor names Model::create binds: a spec pattern with "{layer}" replaced by the layer,
// and the bias beside a weight ("x.weight" -> "x.bias", otherwise "x" -> "x.bias"). Shared
// with whatever must name the same tensors (the tensor-parallel partition planner).
std::string layer_tensor_name(const std::string& pattern, int layer);
std::string bias_tensor_name(const std::string& weight_name);

// Layers [begin, begin + count) of a model: what one pipeline stage holds (count -1: all).
struct LayerRange {
  int begin = 0;
  int count = -1;
};

class Model {
 public:
  // Binds and checks every tensor the spec needs: present, a float dtype, the shape the
  // spec's numbers imply. The error names the file, the tensor and the expected shape.
  // `layers` binds only those layers (a pipeline stage, docs/parallel.md); the others stay
  // empty and the model's own KV layout holds only its layers. Embedding, final norm and lm
  // head are bound whatever the range (views into the mapped file).
  static Result<Model> create(const ModelSpec& spec, const WeightLookup& weights,
                              LayerRange layers = {});

  const ModelSpec& spec() const noexcept { return spec_; }
  // The format of the model's quantized matrices, kNone when every matrix is f32/f16/bf16.
  quant::QuantType weight_quantization() const noexcept { return quantization_; }
  KvLayout kv_layout(int page_size) const;

  // Runs one step: writes the new tokens' keys and values into their pages, and fills
  // `logits` with batch.logit_rows() rows of vocab_size floats. Invalid input (a token
  // outside the vocabulary, a position beyond the page table, a bad page id) is an error.
  // A tensor-parallel shard (runtime/parallel/partition_plan.hpp: this model's spec holds its
  // rank's heads and MLP slice) passes its group's communicator: the outputs of o and down
  // are partial sums, all-reduced before the residual add, and every rank gets the logits.
  Result<void> forward(const StepBatch& batch, KvCache& kv, std::vector<float>& logits,
                       cpu::ThreadPool& pool, cpu::KernelPath path = cpu::KernelPath::kAuto,
                       parallel::Communicator* tensor_parallel = nullptr) const;

  // The layers this model holds: [first_layer(), first_layer() + layer_count()).
  int first_layer() const noexcept { return first_layer_; }
  int layer_count() const noexcept { return layer_count_; }

  // One pipeline stage's part of a step over `layers` (within the held ones), whose keys and
  // values live in `kv` (a layout of layers.count layers). The first layer of the model
  // embeds the batch's tokens (hidden_in empty); a later one starts from hidden_in, the
  // residual stream [tokens x hidden_size] the stage before produced. A range that ends
  // at the last layer fills `out` with the logits, as forward(); otherwise with the residual
  // stream after its last layer.
  Result<void> forward_layers(const StepBatch& batch, KvCache& kv, LayerRange layers,
                              std::span<const float> hidden_in, std::vector<float>& out,
                              cpu::ThreadPool& pool, cpu::KernelPath path = cpu::KernelPath::kAuto,
                              parallel::Communicator* tensor_parallel = nullptr) const;

  // The bound weights, read-only, for other backends (the CUDA model uploads them).
  const TensorView& embedding() const noexcept { return embedding_; }
  const cpu::WeightMatrix& lm_head() const noexcept { return lm_head_; }
  const std::vector<float>& final_norm() const noexcept { return final_norm_; }
  const std::vector<float>& final_norm_bias() const noexcept { return final_norm_bias_; }
  // Learned positions ([max_positions + offset, hidden]; data null without them), the norm
  // after the embedding (empty without one) and ALiBi's per-head slopes (empty without ALiBi).
  const TensorView& position_table() const noexcept { return position_table_; }
  const std::vector<float>& embedding_norm() const noexcept { return embedding_norm_; }
  const std::vector<float>& embedding_norm_bias() const noexcept { return embedding_norm_bias_; }
  const std::vector<float>& alibi_slopes() const noexcept { return alibi_slopes_; }

  struct Layer {
    std::vector<float> attn_norm, attn_norm_bias, mlp_norm, mlp_norm_bias;
    cpu::WeightMatrix q, k, v, qkv, o, gate, up, gate_up, down;
    std::vector<float> q_bias, k_bias, v_bias, qkv_bias, o_bias;
    std::vector<float> gate_bias, up_bias, gate_up_bias, down_bias;
  };

 private:
  ModelSpec spec_;
  quant::QuantType quantization_ = quant::QuantType::kNone;
  TensorView embedding_;
  cpu::WeightMatrix lm_head_;
  std::vector<float> final_norm_, final_norm_bias_;
  TensorView position_table_;
  std::vector<float> embedding_norm_, embedding_norm_bias_;
  std::vector<float> alibi_slopes_;
  std::vector<Layer> layers_;  // num_layers entries; those outside the held range empty
  int first_layer_ = 0, layer_count_ = 0;
  std::vector<std::shared_ptr<const void>> owners_;  // keep mapped weights alive

 public:
  const std::vector<Layer>& layers() const noexcept { return layers_; }
};

// The CPU kernel of a spec's activation (the decoder and the encoder forward passes).
cpu::ActivationKind cpu_activation(Activation a);

// The checks every backend's forward makes before running a step: the KV layout matches the
// model, tokens are in the vocabulary, positions within their page tables, page ids below
// num_pages, sequences cover the batch. The error says which sequence and what was wrong.
Result<void> check_step_batch(const ModelSpec& spec, const StepBatch& batch, const KvLayout& layout,
                              int num_pages);

}  // namespace weft::model
