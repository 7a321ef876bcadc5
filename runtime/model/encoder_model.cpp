// EncoderModel: binding an encoder-only spec's tensors, and its CPU forward pass
// (transformers' BertModel: embeddings + LayerNorm, then per layer attention -> add -> norm,
// MLP -> add -> norm).

#include "runtime/model/encoder_model.hpp"

#include <algorithm>
#include <cmath>
#include <deque>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/norm.hpp"
#include "kernels/cpu/paged_attention.hpp"
#include "kernels/cpu/vector_math.hpp"
#include "runtime/model/float_tensor_binder.hpp"
#include "runtime/model/sequence_kv.hpp"
#include "runtime/model/try_assign.hpp"

namespace weft::model {
namespace {

const float* bias_or_null(const std::vector<float>& b) {
  return b.empty() ? nullptr : b.data();
}

}  // namespace

std::string_view to_string(Pooling pooling) noexcept {
  return pooling == Pooling::kCls ? "cls" : "mean";
}

Result<EncoderModel> EncoderModel::create(const ModelSpec& spec, const WeightLookup& weights) {
  const auto bad = [&](const std::string& what) {
    return Error(ErrorCode::kInvalidArgument, spec.architecture + ": " + what);
  };
  if (auto problem = validate(spec)) return bad(*problem);
  if (spec.network != Network::kEncoderOnly) return bad("EncoderModel needs an encoder_only spec");
  if (spec.position != PositionEmbedding::kLearned) {
    return Error(ErrorCode::kUnsupported,
                 spec.architecture + ": the encoder implements learned absolute positions only");
  }
  if (spec.norm != Norm::kLayer || spec.gated_mlp || spec.qkv_layout != QkvLayout::kSeparate ||
      spec.num_kv_heads != spec.num_heads || spec.head_dim * spec.num_heads != spec.hidden_size) {
    return Error(ErrorCode::kUnsupported,
                 spec.architecture +
                     ": the encoder implements BERT's blocks: layer norm, an ungated MLP, "
                     "separate q/k/v, as many kv heads as heads, head_dim = hidden / heads");
  }
  const auto& e = spec.encoder;
  if (e.max_position_embeddings <= e.position_offset) {
    return bad("encoder max_position_embeddings (" + std::to_string(e.max_position_embeddings) +
               ") must exceed the position offset (" + std::to_string(e.position_offset) + ")");
  }
  EncoderModel m;
  m.spec_ = spec;
  // The prefix is the first one under which the token embedding exists.
  bool found = false;
  for (const auto& prefix : e.tensor_prefixes) {
    if (weights.find(prefix + spec.tensors.embedding) != nullptr) {
      m.prefix_ = prefix;
      found = true;
      break;
    }
  }
  if (!found) {
    std::string tried;
    for (const auto& prefix : e.tensor_prefixes)
      tried += (tried.empty() ? "\"" : ", \"") + prefix + spec.tensors.embedding + "\"";
    return Error(ErrorCode::kNotFound, weights.where + ": no token embedding (tried " + tried +
                                           ") for the " + spec.architecture + " spec");
  }
  FloatTensorBinder bind(spec, weights, m.owners_, m.prefix_);
  const std::int64_t H = spec.hidden_size, I = spec.intermediate_size;
  WEFT_TRY_ASSIGN(m.word_embedding_,
                  bind.tensor(spec.tensors.embedding, {spec.vocab_size, H}, "token embedding"));
  WEFT_TRY_ASSIGN(
      m.position_embedding_,
      bind.tensor(e.position_embedding, {e.max_position_embeddings, H}, "position embedding"));
  if (e.type_vocab_size > 0 && !e.token_type_embedding.empty()) {
    WEFT_TRY_ASSIGN(m.type_embedding_, bind.tensor(e.token_type_embedding, {e.type_vocab_size, H},
                                                   "token type embedding"));
  }
  auto norm = [&](const std::string& name, std::vector<float>& w, std::vector<float>& b,
                  const char* block) -> Result<void> {
    WEFT_TRY_ASSIGN(w, bind.vector(name, H, block));
    if (weights.find(m.prefix_ + bias_tensor_name(name)) != nullptr) {
      WEFT_TRY_ASSIGN(b, bind.vector(bias_tensor_name(name), H, block));
    }
    return {};
  };
  if (!e.embedding_norm.empty()) {
    if (auto ok =
            norm(e.embedding_norm, m.embedding_norm_, m.embedding_norm_bias_, "embedding norm");
        !ok) {
      return ok.error();
    }
  }
  const auto& n = spec.tensors;
  auto linear = [&](const std::string& name, std::int64_t rows, std::int64_t cols, bool with_bias,
                    cpu::WeightMatrix& w, std::vector<float>& b,
                    const char* block) -> Result<void> {
    WEFT_TRY_ASSIGN(w, bind.matrix(name, rows, cols, block));
    if (with_bias) WEFT_TRY_ASSIGN(b, bind.vector(bias_tensor_name(name), rows, block));
    return {};
  };
  m.layers_.resize(static_cast<std::size_t>(spec.num_layers));
  for (int i = 0; i < spec.num_layers; ++i) {
    Layer& L = m.layers_[static_cast<std::size_t>(i)];
    auto name = [&](const std::string& pattern) { return layer_tensor_name(pattern, i); };
    const Result<void> steps[] = {
        linear(name(n.q), H, H, spec.qkv_bias, L.q, L.q_bias, "attention q"),
        linear(name(n.k), H, H, spec.qkv_bias, L.k, L.k_bias, "attention k"),
        linear(name(n.v), H, H, spec.qkv_bias, L.v, L.v_bias, "attention v"),
        linear(name(n.o), H, H, spec.output_bias, L.o, L.o_bias, "attention output"),
        norm(name(n.attn_norm), L.attn_norm, L.attn_norm_bias, "attention norm"),
        linear(name(n.up), I, H, spec.mlp_bias, L.up, L.up_bias, "mlp up"),
        linear(name(n.down), H, I, spec.mlp_bias, L.down, L.down_bias, "mlp down"),
        norm(name(n.mlp_norm), L.mlp_norm, L.mlp_norm_bias, "mlp norm"),
    };
    for (const auto& step : steps) {
      if (!step) return step.error();
    }
  }
  return m;
}

Result<void> EncoderModel::check(const EncodeBatch& batch) const {
  auto bad = [](const std::string& what) { return Error(ErrorCode::kInvalidArgument, what); };
  if (!batch.token_types.empty() && batch.token_types.size() != batch.tokens.size()) {
    return bad("encode batch has " + std::to_string(batch.tokens.size()) + " tokens but " +
               std::to_string(batch.token_types.size()) + " token types");
  }
  std::size_t begin = 0;
  for (std::size_t s = 0; s < batch.lengths.size(); ++s) {
    const int len = batch.lengths[s];
    const std::string where = "sequence " + std::to_string(s) + ": ";
    if (len <= 0) return bad(where + "is empty");
    if (len > max_sequence_length()) {
      return bad(where + std::to_string(len) + " tokens exceed the model's " +
                 std::to_string(max_sequence_length()) + " positions");
    }
    if (begin + static_cast<std::size_t>(len) > batch.tokens.size()) {
      return bad(where + "runs past the batch's " + std::to_string(batch.tokens.size()) +
                 " tokens");
    }
    for (std::size_t t = begin; t < begin + static_cast<std::size_t>(len); ++t) {
      const auto token = batch.tokens[t];
      if (token < 0 || token >= spec_.vocab_size) {
        return bad(where + "token id " + std::to_string(token) + " is outside the vocabulary [0, " +
                   std::to_string(spec_.vocab_size) + ")");
      }
      if (!batch.token_types.empty()) {
        const auto type = batch.token_types[t];
        const int types = type_embedding_.data == nullptr ? 1 : spec_.encoder.type_vocab_size;
        if (type < 0 || type >= types) {
          return bad(where + "token type " + std::to_string(type) + " is outside [0, " +
                     std::to_string(types) + ")");
        }
      }
    }
    begin += static_cast<std::size_t>(len);
  }
  if (begin != batch.tokens.size()) {
    return bad("encode batch sequences cover " + std::to_string(begin) + " of " +
               std::to_string(batch.tokens.size()) + " tokens");
  }
  return {};
}

Result<void> EncoderModel::encode(const EncodeBatch& batch, std::vector<float>& x,
                                  cpu::ThreadPool& pool, cpu::KernelPath path) const {
  if (auto ok = check(batch); !ok) return ok;
  path = cpu::resolve(path);
  const std::size_t T = batch.tokens.size();
  const auto H = static_cast<std::size_t>(spec_.hidden_size);
  const auto I = static_cast<std::size_t>(spec_.intermediate_size);
  const auto D = static_cast<std::size_t>(spec_.head_dim);
  const auto NH = static_cast<std::size_t>(spec_.num_heads);
  const auto eps = static_cast<float>(spec_.norm_epsilon);
  const auto& enc = spec_.encoder;

  // Where each sequence starts, and which sequence / index within it each token is.
  std::vector<std::size_t> starts;
  std::vector<std::size_t> seq_of(T), index_of(T);
  std::size_t longest = 0;
  {
    std::size_t at = 0;
    for (std::size_t s = 0; s < batch.lengths.size(); ++s) {
      starts.push_back(at);
      const auto len = static_cast<std::size_t>(batch.lengths[s]);
      for (std::size_t i = 0; i < len; ++i) {
        seq_of[at + i] = s;
        index_of[at + i] = i;
      }
      at += len;
      longest = std::max(longest, len);
    }
  }

  // Embeddings: word + position + token type, then LayerNorm (fp32, as transformers sums).
  x.assign(T * H, 0.0f);
  std::vector<float> row(H), h(T * H);
  auto add_row = [&](const TensorView& table, std::size_t r, float* out) {
    cpu::to_f32(table.dtype, table.data + r * H * dtype_size(table.dtype), row.data(), H, path);
    for (std::size_t j = 0; j < H; ++j)
      out[j] += row[j];
  };
  for (std::size_t t = 0; t < T; ++t) {
    float* out = x.data() + t * H;
    add_row(word_embedding_, static_cast<std::size_t>(batch.tokens[t]), out);
    if (type_embedding_.data != nullptr) {
      const auto type = batch.token_types.empty() ? 0 : batch.token_types[t];
      add_row(type_embedding_, static_cast<std::size_t>(type), out);
    }
    add_row(position_embedding_, index_of[t] + static_cast<std::size_t>(enc.position_offset), out);
  }
  if (!embedding_norm_.empty()) {
    cpu::layer_norm(x.data(), T, H, embedding_norm_.data(), bias_or_null(embedding_norm_bias_), eps,
                    h.data(), path);
    x.swap(h);
  }

  std::vector<float> q(T * H), k(T * H), v(T * H), attn(T * H), up(T * I);
  // Per sequence, its keys and values as one page of `length` slots (the paged attention
  // kernel's layout: K as [heads][slot][head_dim], then V), so the kernel attends over the
  // whole sequence: positions 0 .. length - 1, both directions.
  std::vector<std::vector<float>> blocks(batch.lengths.size());
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const auto act = cpu_activation(spec_.activation);
  for (const Layer& L : layers_) {
    const cpu::MatmulOutput qkv[] = {{&L.q, bias_or_null(L.q_bias), q.data()},
                                     {&L.k, bias_or_null(L.k_bias), k.data()},
                                     {&L.v, bias_or_null(L.v_bias), v.data()}};
    cpu::matmul_group(x.data(), T, qkv, &pool, path);
    pack_sequence_kv(starts, batch.lengths, k.data(), v.data(), H, NH, D, blocks);
    pool.parallel_for(T, [&](std::size_t begin, std::size_t end) {
      std::vector<float> scratch(longest);
      for (std::size_t t = begin; t < end; ++t) {
        const std::size_t s = seq_of[t];
        const auto len = static_cast<std::size_t>(batch.lengths[s]);
        const void* page = blocks[s].data();
        const cpu::PagedKv view{&page, len, NH, D, KvDtype::kF32};
        cpu::paged_attention(q.data() + t * H, NH, view, 0, len - 1, scale, attn.data() + t * H,
                             scratch.data(), path);
      }
    });
    cpu::matmul(attn.data(), T, L.o, bias_or_null(L.o_bias), h.data(), &pool, path);
    for (std::size_t i = 0; i < T * H; ++i)
      h[i] += x[i];
    cpu::layer_norm(h.data(), T, H, L.attn_norm.data(), bias_or_null(L.attn_norm_bias), eps,
                    x.data(), path);

    cpu::matmul(x.data(), T, L.up, bias_or_null(L.up_bias), up.data(), &pool, path);
    cpu::activate_inplace(act, up.data(), T * I);
    cpu::matmul(up.data(), T, L.down, bias_or_null(L.down_bias), h.data(), &pool, path);
    for (std::size_t i = 0; i < T * H; ++i)
      h[i] += x[i];
    cpu::layer_norm(h.data(), T, H, L.mlp_norm.data(), bias_or_null(L.mlp_norm_bias), eps, x.data(),
                    path);
  }
  return {};
}

Result<std::vector<std::vector<float>>> EncoderModel::embed(const EncodeBatch& batch,
                                                            Pooling pooling, bool normalize,
                                                            cpu::ThreadPool& pool,
                                                            cpu::KernelPath path) const {
  std::vector<float> hidden;
  if (auto ok = encode(batch, hidden, pool, path); !ok) return ok.error();
  std::vector<std::vector<float>> out;
  out.reserve(batch.lengths.size());
  std::size_t at = 0;
  for (const int len : batch.lengths) {
    out.push_back(
        pool_hidden_states(hidden.data() + at * static_cast<std::size_t>(spec_.hidden_size), len,
                           spec_.hidden_size, pooling, normalize));
    at += static_cast<std::size_t>(len);
  }
  return out;
}

std::vector<float> pool_hidden_states(const float* hidden, int length, int hidden_size,
                                      Pooling pooling, bool normalize) {
  const auto H = static_cast<std::size_t>(hidden_size);
  std::vector<float> out(H, 0.0f);
  if (length <= 0) return out;
  if (pooling == Pooling::kCls) {
    std::copy(hidden, hidden + H, out.begin());
  } else {
    // Summed in double: a long sequence's mean should not depend on summation order.
    std::vector<double> sum(H, 0.0);
    for (int t = 0; t < length; ++t) {
      for (std::size_t j = 0; j < H; ++j)
        sum[j] += hidden[static_cast<std::size_t>(t) * H + j];
    }
    for (std::size_t j = 0; j < H; ++j)
      out[j] = static_cast<float>(sum[j] / length);
  }
  if (normalize) {
    double norm = 0;
    for (const float f : out)
      norm += static_cast<double>(f) * f;
    // torch.nn.functional.normalize's eps: a zero vector stays zero.
    const double scale = 1.0 / std::max(std::sqrt(norm), 1e-12);
    for (float& f : out)
      f = static_cast<float>(f * scale);
  }
  return out;
}

}  // namespace weft::model
