#pragma once
// A model as atomic blocks (Inferflow's model specification, see DESIGN.md). A ModelSpec is
// fully resolved: the spec file chose the blocks and config.json filled their numbers in
// (loaders/model_spec_file.* does that). The forward pass switches on these fields, never on
// the architecture's name.

#include <optional>
#include <string>
#include <vector>

#include "runtime/model/encoder_spec.hpp"
#include "runtime/model/seq2seq_spec.hpp"

namespace weft::model {

enum class Network { kDecoderOnly, kEncoderOnly, kEncoderDecoder };
enum class Norm { kRms, kLayer };
enum class Activation { kSilu, kGelu, kGeluTanh, kRelu };
// kRelativeBuckets: T5's learned per-head biases by bucketed relative distance (encoder-decoder
// networks only, ModelSpec::seq2seq).
enum class PositionEmbedding { kRope, kAlibi, kLearned, kSinusoidal, kNone, kRelativeBuckets };
enum class RopeScaling { kDefault, kLinear, kDynamic, kLlama3, kYarn, kLongrope };
// kHalfSplit rotates (x[i], x[i + d/2]) pairs (GPT-NeoX, Hugging Face's rotate_half);
// kInterleaved rotates (x[2i], x[2i + 1]) pairs (GPT-J, Meta's original Llama code).
enum class RopeOrder { kHalfSplit, kInterleaved };
// kFused: one [q heads | k heads | v heads] matrix. kGrouped: per kv head, its group's q
// heads, then its k head, then its v head (Falcon's [kv_heads, group + 2, head_dim]; Bloom's
// [heads, 3, head_dim] is the group-of-one case). Model::create reorders kGrouped rows into
// kFused order once, so the forward passes treat kGrouped exactly as kFused.
enum class QkvLayout { kSeparate, kFused, kGrouped };
// Pre-norm: x + f(norm(x)) (GPT-2 and later). Post-norm: norm(x + f(x)) (the original
// Transformer, OPT-350m), with no final norm.
enum class NormPlacement { kPre, kPost };
// nn.Linear stores [out, in]; GPT-2's Conv1D stores [in, out] (transposed once at load).
enum class LinearLayout { kOutIn, kInOut };

struct RopeSpec {
  RopeScaling scaling = RopeScaling::kDefault;
  RopeOrder order = RopeOrder::kHalfSplit;
  double theta = 10000.0;
  double partial_rotary_factor = 1.0;        // fraction of head_dim that is rotated
  double factor = 1.0;                       // linear, dynamic, llama3, yarn
  int max_position_embeddings = 0;           // dynamic: where NTK scaling starts
  int original_max_position_embeddings = 0;  // llama3, yarn
  double low_freq_factor = 1.0;              // llama3
  double high_freq_factor = 4.0;             // llama3
  double beta_fast = 32.0;                   // yarn
  double beta_slow = 1.0;                    // yarn
  std::optional<double> attention_factor;    // yarn: scales cos and sin
  std::optional<double> mscale;              // yarn (DeepSeek style)
  std::optional<double> mscale_all_dim;      // yarn (DeepSeek style)
  bool truncate = true;                      // yarn: round the correction range
  // longrope (Phi-3's "su"): per-frequency divisors, short_factor while the sequence fits
  // original_max_position_embeddings, long_factor beyond; [rotary_dim / 2] each.
  std::vector<double> short_factor, long_factor;
};

// Tensor names, with "{layer}" standing for the layer index. Bias tensors are the weight's
// name with its ".weight" suffix replaced by ".bias". Empty: the block has no such tensor.
struct TensorNames {
  std::string embedding;
  std::string final_norm;
  std::string lm_head;
  std::string attn_norm;
  std::string mlp_norm;
  std::string q, k, v, qkv;  // separate or fused, as qkv_layout says
  std::string o;
  std::string gate, up, gate_up, down;  // gate_up: a fused [2 * intermediate, hidden] matrix
  std::string position_embedding;       // learned positions: [max_positions + offset, hidden]
  std::string embedding_norm;           // a norm right after the embedding (Bloom)
};

struct ModelSpec {
  std::string architecture;  // for messages only
  Network network = Network::kDecoderOnly;
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;

  Norm norm = Norm::kRms;
  double norm_epsilon = 1e-5;
  Activation activation = Activation::kSilu;
  bool gated_mlp = true;
  bool mlp_bias = false;

  PositionEmbedding position = PositionEmbedding::kRope;
  RopeSpec rope;

  bool qkv_bias = false;
  bool output_bias = false;
  int sliding_window = 0;              // 0: full causal attention
  int sliding_window_first_layer = 0;  // layers below this one attend fully
  QkvLayout qkv_layout = QkvLayout::kSeparate;
  bool tied_embeddings = false;

  // Blocks of the model zoo (docs/model-spec.md): where the norm sits, (1 + w) norms,
  // the embedding's scale, learned positions, parallel attention and MLP, Conv1D weights.
  NormPlacement norm_placement = NormPlacement::kPre;
  double norm_weight_offset = 0.0;  // Gemma: the norm multiplies by (offset + weight)
  double embedding_scale = 1.0;     // Gemma: sqrt(hidden_size)
  int max_positions = 0;            // learned positions: positions the table covers
  int position_offset = 0;          // learned positions: row of position p is p + offset (OPT: 2)
  // x + attn(norm_a(x)) + mlp(norm_m(x)) (GPT-J, Falcon); without an mlp_norm tensor the MLP
  // reads the attention norm's output.
  bool parallel_attention = false;
  LinearLayout linear_layout = LinearLayout::kOutIn;

  TensorNames tensors;
  EncoderSpec encoder;  // network kEncoderOnly only
  Seq2SeqSpec seq2seq;  // network kEncoderDecoder only

  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
  int rotary_dim() const { return static_cast<int>(head_dim * rope.partial_rotary_factor); }
  bool layer_uses_window(int layer) const {
    return sliding_window > 0 && layer >= sliding_window_first_layer;
  }
};

// Checks the numbers agree with each other (heads divide, dims positive, ...). The message
// names the field and what was expected.
std::optional<std::string> validate(const ModelSpec& spec);

// The token ids generation stops at, and the rest of generation_config.json Weft uses.
struct GenerationDefaults {
  std::vector<int> eos_token_ids;
  std::optional<int> bos_token_id;
  std::optional<int> pad_token_id;
};

}  // namespace weft::model
