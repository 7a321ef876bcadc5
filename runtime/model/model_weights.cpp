// Model::create: finds, checks and binds the tensors a ModelSpec names.

#include <cstdint>
#include <cstring>
#include <deque>
#include <string>

#include "kernels/cpu/vector_math.hpp"
#include "runtime/model/model.hpp"

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
                       std::string(dtype_name(t->dtype)) + ", expected F32, F16 or BF16");
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
    auto t = tensor(name, {rows, cols}, block);
    if (!t) return t.error();
    return cpu::WeightMatrix{(*t)->dtype, (*t)->data, static_cast<std::size_t>(rows),
                             static_cast<std::size_t>(cols)};
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

#define WEFT_TRY_ASSIGN(target, expr)     \
  do {                                    \
    auto weft_r = (expr);                 \
    if (!weft_r) return weft_r.error();   \
    (target) = std::move(weft_r.value()); \
  } while (0)

}  // namespace

Result<Model> Model::create(const ModelSpec& spec, const WeightLookup& weights) {
  if (auto problem = validate(spec)) {
    return Error(ErrorCode::kInvalidArgument, spec.architecture + ": " + *problem);
  }
  if (spec.network != Network::kDecoderOnly) {
    return Error(ErrorCode::kUnsupported, spec.architecture +
                                              ": only decoder-only networks have a forward "
                                              "pass so far");
  }
  if (spec.position != PositionEmbedding::kRope && spec.position != PositionEmbedding::kNone) {
    return Error(ErrorCode::kUnsupported,
                 spec.architecture +
                     ": the CPU forward pass implements rope and no position embedding; "
                     "alibi, learned and sinusoidal are named by the spec format but not "
                     "implemented yet");
  }
  Model m;
  m.spec_ = spec;
  const auto& n = spec.tensors;
  const std::int64_t hidden = spec.hidden_size, inter = spec.intermediate_size;
  const std::int64_t q_dim = spec.q_dim(), kv_dim = spec.kv_dim();
  Binder bind(spec, weights, m.owners_);
  const bool layer_norm = spec.norm == Norm::kLayer;

  auto norm = [&](const std::string& name, std::vector<float>& weight, std::vector<float>& bias,
                  const char* block) -> Result<void> {
    WEFT_TRY_ASSIGN(weight, bind.vector(name, hidden, block));
    if (layer_norm && weights.find(bias_tensor_name(name)) != nullptr) {
      WEFT_TRY_ASSIGN(bias, bind.vector(bias_tensor_name(name), hidden, block));
    }
    return {};
  };
  auto linear = [&](const std::string& name, std::int64_t rows, std::int64_t cols, bool with_bias,
                    cpu::WeightMatrix& w, std::vector<float>& b,
                    const char* block) -> Result<void> {
    WEFT_TRY_ASSIGN(w, bind.matrix(name, rows, cols, block));
    if (with_bias) WEFT_TRY_ASSIGN(b, bind.vector(bias_tensor_name(name), rows, block));
    return {};
  };

  {
    auto t = bind.tensor(n.embedding, {spec.vocab_size, hidden}, "token embedding");
    if (!t) return t.error();
    m.embedding_ = **t;
  }
  if (auto r = norm(n.final_norm, m.final_norm_, m.final_norm_bias_, "final norm"); !r) {
    return r.error();
  }
  if (spec.tied_embeddings) {
    m.lm_head_ = cpu::WeightMatrix{m.embedding_.dtype, m.embedding_.data,
                                   static_cast<std::size_t>(spec.vocab_size),
                                   static_cast<std::size_t>(hidden)};
  } else {
    WEFT_TRY_ASSIGN(m.lm_head_, bind.matrix(n.lm_head, spec.vocab_size, hidden, "lm head"));
  }

  m.layers_.resize(static_cast<std::size_t>(spec.num_layers));
  for (int i = 0; i < spec.num_layers; ++i) {
    Layer& L = m.layers_[static_cast<std::size_t>(i)];
    auto name = [&](const std::string& pattern) { return layer_tensor_name(pattern, i); };
    std::vector<Result<void>> steps;
    steps.push_back(norm(name(n.attn_norm), L.attn_norm, L.attn_norm_bias, "attention norm"));
    steps.push_back(norm(name(n.mlp_norm), L.mlp_norm, L.mlp_norm_bias, "mlp norm"));
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
  return KvLayout{spec_.num_layers, spec_.num_kv_heads, spec_.head_dim, page_size};
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
