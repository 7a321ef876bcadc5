// Model::create: finds, checks and binds the tensors a ModelSpec names.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>

#include "kernels/cpu/vector_math.hpp"
#include "runtime/model/alibi.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/try_assign.hpp"

namespace weft::model {
namespace {

bool is_float(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16;
}

class Binder {
 public:
  Binder(const ModelSpec& spec, const WeightLookup& weights,
         std::vector<std::shared_ptr<const void>>& owners)
      : spec_(spec), weights_(weights), owners_(owners) {}

  Result<const TensorView*> tensor(const std::string& name, const std::vector<std::int64_t>& shape,
                                   const char* block) {
    const TensorView* t = weights_.find(name);
    if (t == nullptr) {
      return Error(ErrorCode::kNotFound, weights_.where + ": tensor \"" + name + "\" (" + block +
                                             ") required by the " + spec_.architecture +
                                             " spec is absent from the checkpoint");
    }
    if (!is_float(t->dtype)) {
      return Error(ErrorCode::kInvalidArgument,
                   weights_.origin(name) + ": tensor \"" + name + "\" has dtype " +
                       std::string(dtype_name(t->dtype)) + ", expected F32, F16 or BF16" +
                       (t->dtype == DType::kU8 && weights_.quantized == quant::QuantType::kNone
                            ? " (a quantized checkpoint names its format in config.json's "
                              "\"quantization\" entry)"
                            : ""));
    }
    if (t->shape != shape) {
      return Error(ErrorCode::kInvalidArgument,
                   weights_.origin(name) + ": tensor \"" + name + "\" has shape " +
                       shape_string(t->shape) + ", but the " + spec_.architecture +
                       " spec with this config.json expects " + shape_string(shape));
    }
    const auto address = reinterpret_cast<std::uintptr_t>(t->data);
    if (address % dtype_size(t->dtype) != 0) {
      // safetensors writers pad the header so data is aligned, but the format does not
      // require it; kernels read f32/f16/bf16 through typed pointers, so copy such a tensor
      // once into aligned memory instead of reading it misaligned.
      auto copy = std::make_shared<std::vector<std::uint64_t>>((t->nbytes() + 7) / 8);
      std::memcpy(copy->data(), t->data, t->nbytes());
      TensorView& aligned = copies_.emplace_back(*t);
      aligned.data = reinterpret_cast<const std::byte*>(copy->data());
      aligned.owner = copy;
      t = &aligned;
    }
    owners_.push_back(t->owner);
    return t;
  }

  Result<cpu::WeightMatrix> matrix(const std::string& name, std::int64_t rows, std::int64_t cols,
                                   const char* block) {
    const quant::QuantType format = weights_.quantized;
    if (const TensorView* q = weights_.find(name);
        q != nullptr && q->dtype == DType::kU8 && format != quant::QuantType::kNone) {
      const auto bytes =
          static_cast<std::int64_t>(quant::row_bytes(format, static_cast<std::size_t>(cols)));
      if (q->shape != std::vector<std::int64_t>{rows, bytes}) {
        return Error(ErrorCode::kInvalidArgument,
                     weights_.origin(name) + ": quantized tensor \"" + name + "\" has shape " +
                         shape_string(q->shape) + ", but a " + shape_string({rows, cols}) + " " +
                         std::string(quant::quant_info(format).name) + " matrix is stored as " +
                         shape_string({rows, bytes}) + " bytes");
      }
      owners_.push_back(q->owner);
      return cpu::WeightMatrix{DType::kU8, q->data, static_cast<std::size_t>(rows),
                               static_cast<std::size_t>(cols), format};
    }
    auto t = tensor(name, {rows, cols}, block);
    if (!t) return t.error();
    return cpu::WeightMatrix{(*t)->dtype, (*t)->data, static_cast<std::size_t>(rows),
                             static_cast<std::size_t>(cols)};
  }

  // A [rows, cols] matrix the checkpoint stores as [cols, rows] (GPT-2's Conv1D), transposed
  // once into memory the model owns, in its own dtype.
  Result<cpu::WeightMatrix> transposed(const std::string& name, std::int64_t rows,
                                       std::int64_t cols, const char* block) {
    auto t = tensor(name, {cols, rows}, block);
    if (!t) return t.error();
    const std::size_t es = dtype_size((*t)->dtype);
    const auto R = static_cast<std::size_t>(rows), C = static_cast<std::size_t>(cols);
    auto copy = std::make_shared<std::vector<std::uint64_t>>((R * C * es + 7) / 8);
    auto* dst = reinterpret_cast<std::byte*>(copy->data());
    const std::byte* src = (*t)->data;
    for (std::size_t c = 0; c < C; ++c) {
      for (std::size_t r = 0; r < R; ++r)
        std::memcpy(dst + (r * C + c) * es, src + (c * R + r) * es, es);
    }
    owners_.push_back(copy);
    return cpu::WeightMatrix{(*t)->dtype, dst, R, C};
  }

  // Reorders a grouped fused qkv matrix (per kv head: its q heads, its k head, its v head)
  // and its bias into q | k | v order, into memory the model owns.
  void ungroup_qkv(cpu::WeightMatrix& w, std::vector<float>& bias) {
    const auto D = static_cast<std::size_t>(spec_.head_dim);
    const auto G = static_cast<std::size_t>(spec_.num_kv_heads);
    const std::size_t per_group = static_cast<std::size_t>(spec_.num_heads) / G;
    const std::size_t es = dtype_size(w.dtype), row_bytes = w.cols * es;
    auto copy = std::make_shared<std::vector<std::uint64_t>>((w.rows * row_bytes + 7) / 8);
    auto* dst = reinterpret_cast<std::byte*>(copy->data());
    const auto* src = static_cast<const std::byte*>(w.data);
    std::vector<float> new_bias(bias.size());
    // Source head block g * (per_group + 2) + j goes to q head g * per_group + j, the block
    // after the group's q heads to k head g, the next to v head g.
    auto move_head = [&](std::size_t from, std::size_t to) {
      std::memcpy(dst + to * D * row_bytes, src + from * D * row_bytes, D * row_bytes);
      if (!bias.empty()) {
        std::copy_n(bias.begin() + static_cast<std::ptrdiff_t>(from * D), D,
                    new_bias.begin() + static_cast<std::ptrdiff_t>(to * D));
      }
    };
    const std::size_t heads = per_group * G;
    for (std::size_t g = 0; g < G; ++g) {
      const std::size_t first = g * (per_group + 2);
      for (std::size_t j = 0; j < per_group; ++j)
        move_head(first + j, g * per_group + j);
      move_head(first + per_group, heads + g);
      move_head(first + per_group + 1, heads + G + g);
    }
    owners_.push_back(copy);
    w.data = dst;
    bias = std::move(new_bias);
  }

  Result<std::vector<float>> vector(const std::string& name, std::int64_t n, const char* block) {
    auto t = tensor(name, {n}, block);
    if (!t) return t.error();
    std::vector<float> out(static_cast<std::size_t>(n));
    cpu::to_f32((*t)->dtype, (*t)->data, out.data(), out.size(), cpu::KernelPath::kScalar);
    return out;
  }

 private:
  const ModelSpec& spec_;
  const WeightLookup& weights_;
  std::vector<std::shared_ptr<const void>>& owners_;
  std::deque<TensorView> copies_;  // aligned copies; a deque keeps pointers to them stable
};

}  // namespace

Result<Model> Model::create(const ModelSpec& spec, const WeightLookup& weights, LayerRange layers) {
  if (auto problem = validate(spec)) {
    return Error(ErrorCode::kInvalidArgument, spec.architecture + ": " + *problem);
  }
  if (spec.network != Network::kDecoderOnly) {
    return Error(ErrorCode::kUnsupported, spec.architecture +
                                              ": only decoder-only networks have a forward "
                                              "pass so far");
  }
  if (spec.position == PositionEmbedding::kSinusoidal) {
    return Error(ErrorCode::kUnsupported,
                 spec.architecture +
                     ": sinusoidal positions are named by the spec format but have no forward "
                     "pass yet (rope, alibi, learned and none do)");
  }
  if (layers.count < 0) layers = {0, spec.num_layers};
  if (layers.begin < 0 || layers.count < 1 || layers.begin + layers.count > spec.num_layers) {
    return Error(ErrorCode::kInvalidArgument,
                 spec.architecture + ": layers [" + std::to_string(layers.begin) + ", " +
                     std::to_string(layers.begin + layers.count) + ") are not within the model's " +
                     std::to_string(spec.num_layers) + " layers");
  }
  Model m;
  m.spec_ = spec;
  m.first_layer_ = layers.begin;
  m.layer_count_ = layers.count;
  m.quantization_ = weights.quantized;
  const auto& n = spec.tensors;
  const std::int64_t hidden = spec.hidden_size, inter = spec.intermediate_size;
  const std::int64_t q_dim = spec.q_dim(), kv_dim = spec.kv_dim();
  Binder bind(spec, weights, m.owners_);
  const bool layer_norm = spec.norm == Norm::kLayer;

  auto norm = [&](const std::string& name, std::vector<float>& weight, std::vector<float>& bias,
                  const char* block) -> Result<void> {
    WEFT_TRY_ASSIGN(weight, bind.vector(name, hidden, block));
    // Gemma's norms multiply by (1 + w): the offset is added once here, in fp32 as
    // transformers adds it, so every backend's norm kernel stays a plain one.
    if (spec.norm_weight_offset != 0.0) {
      for (auto& w : weight)
        w = static_cast<float>(spec.norm_weight_offset) + w;
    }
    if (layer_norm && weights.find(bias_tensor_name(name)) != nullptr) {
      WEFT_TRY_ASSIGN(bias, bind.vector(bias_tensor_name(name), hidden, block));
    }
    return {};
  };
  auto linear = [&](const std::string& name, std::int64_t rows, std::int64_t cols, bool with_bias,
                    cpu::WeightMatrix& w, std::vector<float>& b,
                    const char* block) -> Result<void> {
    if (spec.linear_layout == LinearLayout::kInOut) {
      WEFT_TRY_ASSIGN(w, bind.transposed(name, rows, cols, block));
    } else {
      WEFT_TRY_ASSIGN(w, bind.matrix(name, rows, cols, block));
    }
    if (with_bias) WEFT_TRY_ASSIGN(b, bind.vector(bias_tensor_name(name), rows, block));
    return {};
  };

  {
    auto t = bind.tensor(n.embedding, {spec.vocab_size, hidden}, "token embedding");
    if (!t) return t.error();
    m.embedding_ = **t;
  }
  // Post-norm layers end normalized; such networks (OPT-350m) have no final norm.
  if (spec.norm_placement == NormPlacement::kPre) {
    if (auto r = norm(n.final_norm, m.final_norm_, m.final_norm_bias_, "final norm"); !r) {
      return r.error();
    }
  }
  if (!n.embedding_norm.empty()) {
    if (auto r =
            norm(n.embedding_norm, m.embedding_norm_, m.embedding_norm_bias_, "embedding norm");
        !r) {
      return r.error();
    }
  }
  if (spec.position == PositionEmbedding::kLearned) {
    auto t =
        bind.tensor(n.position_embedding,
                    {static_cast<std::int64_t>(spec.max_positions) + spec.position_offset, hidden},
                    "learned positions");
    if (!t) return t.error();
    m.position_table_ = **t;
  }
  if (spec.position == PositionEmbedding::kAlibi)
    m.alibi_slopes_ = model::alibi_slopes(spec.num_heads);
  if (spec.tied_embeddings) {
    m.lm_head_ = cpu::WeightMatrix{m.embedding_.dtype, m.embedding_.data,
                                   static_cast<std::size_t>(spec.vocab_size),
                                   static_cast<std::size_t>(hidden)};
  } else {
    WEFT_TRY_ASSIGN(m.lm_head_, bind.matrix(n.lm_head, spec.vocab_size, hidden, "lm head"));
  }

  m.layers_.resize(static_cast<std::size_t>(spec.num_layers));
  for (int i = layers.begin; i < layers.begin + layers.count; ++i) {
    Layer& L = m.layers_[static_cast<std::size_t>(i)];
    auto name = [&](const std::string& pattern) { return layer_tensor_name(pattern, i); };
    std::vector<Result<void>> steps;
    steps.push_back(norm(name(n.attn_norm), L.attn_norm, L.attn_norm_bias, "attention norm"));
    if (!n.mlp_norm.empty()) {
      steps.push_back(norm(name(n.mlp_norm), L.mlp_norm, L.mlp_norm_bias, "mlp norm"));
    }
    if (spec.qkv_layout == QkvLayout::kSeparate) {
      steps.push_back(
          linear(name(n.q), q_dim, hidden, spec.qkv_bias, L.q, L.q_bias, "attention q"));
      steps.push_back(
          linear(name(n.k), kv_dim, hidden, spec.qkv_bias, L.k, L.k_bias, "attention k"));
      steps.push_back(
          linear(name(n.v), kv_dim, hidden, spec.qkv_bias, L.v, L.v_bias, "attention v"));
    } else {
      steps.push_back(linear(name(n.qkv), q_dim + 2 * kv_dim, hidden, spec.qkv_bias, L.qkv,
                             L.qkv_bias, "attention fused qkv"));
      if (spec.qkv_layout == QkvLayout::kGrouped && steps.back())
        bind.ungroup_qkv(L.qkv, L.qkv_bias);
    }
    steps.push_back(
        linear(name(n.o), hidden, q_dim, spec.output_bias, L.o, L.o_bias, "attention output"));
    if (spec.gated_mlp && !n.gate_up.empty()) {
      steps.push_back(linear(name(n.gate_up), 2 * inter, hidden, spec.mlp_bias, L.gate_up,
                             L.gate_up_bias, "mlp fused gate_up"));
    } else if (spec.gated_mlp) {
      steps.push_back(
          linear(name(n.gate), inter, hidden, spec.mlp_bias, L.gate, L.gate_bias, "mlp gate"));
    }
    if (!spec.gated_mlp || n.gate_up.empty()) {
      steps.push_back(linear(name(n.up), inter, hidden, spec.mlp_bias, L.up, L.up_bias, "mlp up"));
    }
    steps.push_back(
        linear(name(n.down), hidden, inter, spec.mlp_bias, L.down, L.down_bias, "mlp down"));
    for (auto& step : steps) {
      if (!step) return step.error();
    }
  }
  return m;
}

KvLayout Model::kv_layout(int page_size) const {
  return KvLayout{layer_count_, spec_.num_kv_heads, spec_.head_dim, page_size};
}

std::string layer_tensor_name(const std::string& pattern, int layer) {
  std::string out = pattern;
  const std::string key = "{layer}";
  for (auto pos = out.find(key); pos != std::string::npos; pos = out.find(key)) {
    out.replace(pos, key.size(), std::to_string(layer));
  }
  return out;
}

std::string bias_tensor_name(const std::string& weight_name) {
  const std::string suffix = ".weight";
  if (weight_name.size() > suffix.size() &&
      weight_name.compare(weight_name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return weight_name.substr(0, weight_name.size() - suffix.size()) + ".bias";
  }
  return weight_name + ".bias";
}

}  // namespace weft::model
