// Seq2SeqModel::create: finds, checks and binds the tensors an encoder-decoder spec names.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/cpu/vector_math.hpp"
#include "runtime/model/float_tensor_binder.hpp"
#include "runtime/model/seq2seq_model.hpp"
#include "runtime/model/try_assign.hpp"

namespace weft::model {

KvLayout Seq2SeqModel::kv_layout(int page_size) const {
  KvLayout layout;
  layout.num_layers = spec_.num_layers;
  layout.num_kv_heads = spec_.num_kv_heads;
  layout.head_dim = spec_.head_dim;
  layout.page_size = page_size;
  return layout;
}

Result<Seq2SeqModel> Seq2SeqModel::create(const ModelSpec& spec, const WeightLookup& weights) {
  const auto bad = [&](const std::string& what) {
    return Error(ErrorCode::kInvalidArgument, spec.architecture + ": " + what);
  };
  if (auto problem = validate(spec)) return bad(*problem);
  if (spec.network != Network::kEncoderDecoder) {
    return bad("Seq2SeqModel needs an encoder_decoder spec");
  }
  const auto& e = spec.seq2seq;
  if (spec.position != PositionEmbedding::kRelativeBuckets &&
      spec.position != PositionEmbedding::kSinusoidal) {
    return Error(ErrorCode::kUnsupported,
                 spec.architecture +
                     ": encoder-decoder networks implement relative_buckets (T5) "
                     "and sinusoidal (M2M100) positions only");
  }
  if (spec.qkv_layout != QkvLayout::kSeparate || spec.num_kv_heads != spec.num_heads ||
      spec.norm_placement != NormPlacement::kPre || spec.linear_layout != LinearLayout::kOutIn ||
      spec.parallel_attention) {
    return Error(ErrorCode::kUnsupported,
                 spec.architecture +
                     ": encoder-decoder networks implement pre-norm layers with separate q/k/v "
                     "(nn.Linear layout) and as many kv heads as heads");
  }
  if (e.encoder_layers <= 0 || e.encoder_heads <= 0 || e.encoder_head_dim <= 0 ||
      e.encoder_intermediate_size <= 0) {
    return bad("the encoder's layers, heads, head_dim and intermediate size must be positive");
  }
  if (spec.position == PositionEmbedding::kSinusoidal && spec.hidden_size < 4) {
    return bad("sinusoidal positions need hidden_size of at least 4");
  }
  Seq2SeqModel m;
  m.spec_ = spec;
  FloatTensorBinder bind(spec, weights, m.owners_);
  const std::int64_t H = spec.hidden_size;
  const bool layer_norm = spec.norm == model::Norm::kLayer;

  // The shared token embedding: its own name, else a tied copy's.
  std::string embedding_name = spec.tensors.embedding;
  if (!bind.has(embedding_name)) {
    for (const auto& fallback : e.embedding_fallbacks) {
      if (bind.has(fallback)) {
        embedding_name = fallback;
        break;
      }
    }
  }
  WEFT_TRY_ASSIGN(m.embedding_,
                  bind.tensor(embedding_name, {spec.vocab_size, H}, "token embedding"));
  if (spec.tied_embeddings) {
    m.lm_head_ =
        cpu::WeightMatrix{m.embedding_.dtype, m.embedding_.data,
                          static_cast<std::size_t>(spec.vocab_size), static_cast<std::size_t>(H)};
  } else {
    WEFT_TRY_ASSIGN(m.lm_head_, bind.matrix(spec.tensors.lm_head, spec.vocab_size, H, "lm head"));
  }

  auto norm = [&](const std::string& name, Norm& out, const std::string& block) -> Result<void> {
    WEFT_TRY_ASSIGN(out.weight, bind.vector(name, H, block));
    if (layer_norm && bind.has(bias_tensor_name(name))) {
      WEFT_TRY_ASSIGN(out.bias, bind.vector(bias_tensor_name(name), H, block));
    }
    return {};
  };
  auto linear = [&](const std::string& name, std::int64_t rows, std::int64_t cols, bool with_bias,
                    cpu::WeightMatrix& w, std::vector<float>& b,
                    const std::string& block) -> Result<void> {
    WEFT_TRY_ASSIGN(w, bind.matrix(name, rows, cols, block));
    if (with_bias) WEFT_TRY_ASSIGN(b, bind.vector(bias_tensor_name(name), rows, block));
    return {};
  };
  // q/k/v project `kv_in`-wide states (the encoder's output for cross-attention).
  auto attention = [&](const std::string& q, const std::string& k, const std::string& v,
                       const std::string& o, int layer, std::int64_t heads, std::int64_t head_dim,
                       Attention& out, const std::string& block) -> Result<void> {
    const std::int64_t inner = heads * head_dim;
    const Result<void> steps[] = {
        linear(layer_tensor_name(q, layer), inner, H, spec.qkv_bias, out.q, out.q_bias,
               block + " q"),
        linear(layer_tensor_name(k, layer), inner, H, spec.qkv_bias, out.k, out.k_bias,
               block + " k"),
        linear(layer_tensor_name(v, layer), inner, H, spec.qkv_bias, out.v, out.v_bias,
               block + " v"),
        linear(layer_tensor_name(o, layer), H, inner, spec.output_bias, out.o, out.o_bias,
               block + " output"),
    };
    for (const auto& step : steps) {
      if (!step) return step.error();
    }
    return {};
  };
  auto mlp = [&](const std::string& gate, const std::string& up, const std::string& down, int layer,
                 std::int64_t inter, Mlp& out, const std::string& block) -> Result<void> {
    if (spec.gated_mlp) {
      if (auto ok = linear(layer_tensor_name(gate, layer), inter, H, spec.mlp_bias, out.gate,
                           out.gate_bias, block + " gate");
          !ok) {
        return ok.error();
      }
    }
    if (auto ok = linear(layer_tensor_name(up, layer), inter, H, spec.mlp_bias, out.up, out.up_bias,
                         block + " up");
        !ok) {
      return ok.error();
    }
    return linear(layer_tensor_name(down, layer), H, inter, spec.mlp_bias, out.down, out.down_bias,
                  block + " down");
  };

  if (spec.position == PositionEmbedding::kRelativeBuckets) {
    WEFT_TRY_ASSIGN(m.encoder_relative_bias_,
                    bind.table(e.encoder_relative_bias, e.relative_buckets, e.encoder_heads,
                               "encoder relative attention bias"));
    WEFT_TRY_ASSIGN(m.decoder_relative_bias_,
                    bind.table(e.decoder_relative_bias, e.relative_buckets, spec.num_heads,
                               "decoder relative attention bias"));
  }
  m.encoder_layers_.resize(static_cast<std::size_t>(e.encoder_layers));
  for (int i = 0; i < e.encoder_layers; ++i) {
    auto& L = m.encoder_layers_[static_cast<std::size_t>(i)];
    const std::string at = "encoder layer " + std::to_string(i);
    const Result<void> steps[] = {
        norm(layer_tensor_name(e.encoder_attn_norm, i), L.attn_norm, at + " attention norm"),
        attention(e.encoder_q, e.encoder_k, e.encoder_v, e.encoder_o, i, e.encoder_heads,
                  e.encoder_head_dim, L.attn, at + " attention"),
        norm(layer_tensor_name(e.encoder_mlp_norm, i), L.mlp_norm, at + " mlp norm"),
        mlp(e.encoder_gate, e.encoder_up, e.encoder_down, i, e.encoder_intermediate_size, L.mlp,
            at + " mlp"),
    };
    for (const auto& step : steps) {
      if (!step) return step.error();
    }
  }
  if (auto ok = norm(e.encoder_final_norm, m.encoder_final_norm_, "encoder final norm"); !ok) {
    return ok.error();
  }
  const auto& n = spec.tensors;
  m.decoder_layers_.resize(static_cast<std::size_t>(spec.num_layers));
  for (int i = 0; i < spec.num_layers; ++i) {
    auto& L = m.decoder_layers_[static_cast<std::size_t>(i)];
    const std::string at = "decoder layer " + std::to_string(i);
    const Result<void> steps[] = {
        norm(layer_tensor_name(n.attn_norm, i), L.attn_norm, at + " self-attention norm"),
        attention(n.q, n.k, n.v, n.o, i, spec.num_heads, spec.head_dim, L.self,
                  at + " self-attention"),
        norm(layer_tensor_name(e.cross_norm, i), L.cross_norm, at + " cross-attention norm"),
        attention(e.cross_q, e.cross_k, e.cross_v, e.cross_o, i, spec.num_heads, spec.head_dim,
                  L.cross, at + " cross-attention"),
        norm(layer_tensor_name(n.mlp_norm, i), L.mlp_norm, at + " mlp norm"),
        mlp(n.gate, n.up, n.down, i, spec.intermediate_size, L.mlp, at + " mlp"),
    };
    for (const auto& step : steps) {
      if (!step) return step.error();
    }
  }
  if (auto ok = norm(n.final_norm, m.decoder_final_norm_, "decoder final norm"); !ok) {
    return ok.error();
  }
  return m;
}

}  // namespace weft::model
