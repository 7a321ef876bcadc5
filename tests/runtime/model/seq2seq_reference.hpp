#pragma once
// Encoder-decoder checkpoints (T5 with a ReLU MLP and tied head, T5 v1.1-style gated-gelu with
// an untied head, M2M100) as tiny in-memory checkpoints named and shaped as transformers saves
// them, and a plain double-precision reference of their forward pass written from
// transformers' modeling semantics (T5Attention's relative buckets, M2M100's sinusoidal table,
// pre-norm layers, cross-attention), sharing no code with Weft's forward pass.

#include <cmath>
#include <string>
#include <vector>

#include "tests/runtime/model/zoo_reference.hpp"

namespace weft::testing::seq2seq {

using zoo::Vec;
using zoo::Weights;

enum class Kind { kT5Relu, kT5Gated, kM2M100 };

struct Config {
  Kind kind;
  int vocab = 40, hidden = 16;
  int enc_layers = 2, dec_layers = 2, enc_heads = 4, dec_heads = 4, enc_hd = 4, dec_hd = 4;
  int enc_ffn = 32, dec_ffn = 32;
  int buckets = 8, max_distance = 12;  // T5
  int pad = 1;                         // M2M100's padding_idx
  bool tied = true;
  bool t5() const { return kind != Kind::kM2M100; }
};

inline Config config_of(Kind k) {
  Config c{k};
  if (k == Kind::kT5Gated) {
    c.enc_layers = 1;
    c.dec_layers = 3;
    c.enc_heads = c.dec_heads = 3;
    c.enc_hd = c.dec_hd = 6;  // inner 18 != d_model 16
    c.enc_ffn = c.dec_ffn = 24;
    c.buckets = 16;
    c.max_distance = 20;
    c.tied = false;
  } else if (k == Kind::kM2M100) {
    c.enc_layers = 2;
    c.dec_layers = 1;
    c.enc_heads = 4;
    c.enc_hd = 4;
    c.dec_heads = 2;
    c.dec_hd = 8;
    c.enc_ffn = 32;
    c.dec_ffn = 24;
  }
  return c;
}

inline std::string config_json(const Config& c) {
  auto n = [](int v) { return std::to_string(v); };
  if (c.t5()) {
    return R"({"architectures":["T5ForConditionalGeneration"],"model_type":"t5","vocab_size":)" +
           n(c.vocab) + R"(,"d_model":)" + n(c.hidden) + R"(,"d_kv":)" + n(c.enc_hd) +
           R"(,"d_ff":)" + n(c.enc_ffn) + R"(,"num_layers":)" + n(c.enc_layers) +
           R"(,"num_decoder_layers":)" + n(c.dec_layers) + R"(,"num_heads":)" + n(c.enc_heads) +
           R"(,"relative_attention_num_buckets":)" + n(c.buckets) +
           R"(,"relative_attention_max_distance":)" + n(c.max_distance) +
           R"(,"layer_norm_epsilon":1e-6,"feed_forward_proj":")" +
           (c.kind == Kind::kT5Gated ? "gated-gelu" : "relu") + R"(","tie_word_embeddings":)" +
           (c.tied ? "true" : "false") +
           R"(,"is_encoder_decoder":true,"pad_token_id":0,"eos_token_id":1,"decoder_start_token_id":0})";
  }
  return R"({"architectures":["M2M100ForConditionalGeneration"],"model_type":"m2m_100","vocab_size":)" +
         n(c.vocab) + R"(,"d_model":)" + n(c.hidden) + R"(,"encoder_layers":)" + n(c.enc_layers) +
         R"(,"decoder_layers":)" + n(c.dec_layers) + R"(,"encoder_attention_heads":)" +
         n(c.enc_heads) + R"(,"decoder_attention_heads":)" + n(c.dec_heads) +
         R"(,"encoder_ffn_dim":)" + n(c.enc_ffn) + R"(,"decoder_ffn_dim":)" + n(c.dec_ffn) +
         R"(,"max_position_embeddings":64,"activation_function":"relu","scale_embedding":true,"pad_token_id":)" +
         n(c.pad) +
         R"(,"bos_token_id":0,"eos_token_id":2,"decoder_start_token_id":2,"is_encoder_decoder":true})";
}

// Attention tensor names of one block: q, k, v, o weights (biases beside them when present).
struct AttnNames {
  std::string q, k, v, o;
};

inline AttnNames t5_attn(const std::string& stack, int layer, int sub, const char* kind) {
  const std::string p = stack + ".block." + std::to_string(layer) + ".layer." +
                        std::to_string(sub) + "." + kind + ".";
  return {p + "q.weight", p + "k.weight", p + "v.weight", p + "o.weight"};
}

inline AttnNames m2m_attn(const std::string& stack, int layer, const char* kind) {
  const std::string p = "model." + stack + ".layers." + std::to_string(layer) + "." + kind + ".";
  return {p + "q_proj.weight", p + "k_proj.weight", p + "v_proj.weight", p + "out_proj.weight"};
}

inline Weights make_weights(const Config& c) {
  Weights w;
  const std::int64_t H = c.hidden, V = c.vocab;
  auto norm = [&](const std::string& name, bool bias) {
    w.add(name + ".weight", {H}, 0.2, 1.0);
    if (bias) w.add(name + ".bias", {H}, 0.2);
  };
  auto linear = [&](const std::string& weight, std::int64_t out, std::int64_t in, bool bias) {
    w.add(weight, {out, in}, 1.0 / std::sqrt(static_cast<double>(in)));
    if (bias) w.add(weight.substr(0, weight.size() - 6) + "bias", {out}, 0.2);
  };
  auto attention = [&](const AttnNames& a, std::int64_t inner, bool bias) {
    linear(a.q, inner, H, bias);
    linear(a.k, inner, H, bias);
    linear(a.v, inner, H, bias);
    linear(a.o, H, inner, bias);
  };
  if (c.t5()) {
    const bool gated = c.kind == Kind::kT5Gated;
    w.add("shared.weight", {V, H}, 1.0);
    for (const char* stack : {"encoder", "decoder"}) {
      const bool enc = std::string(stack) == "encoder";
      const int layers = enc ? c.enc_layers : c.dec_layers;
      const std::int64_t inner = static_cast<std::int64_t>(c.enc_heads) * c.enc_hd;
      const std::int64_t ffn = enc ? c.enc_ffn : c.dec_ffn;
      for (int l = 0; l < layers; ++l) {
        const std::string b = std::string(stack) + ".block." + std::to_string(l) + ".layer.";
        norm(b + "0.layer_norm", false);
        attention(t5_attn(stack, l, 0, "SelfAttention"), inner, false);
        const std::string ff = b + (enc ? "1" : "2");
        if (!enc) {
          norm(b + "1.layer_norm", false);
          attention(t5_attn(stack, l, 1, "EncDecAttention"), inner, false);
        }
        norm(ff + ".layer_norm", false);
        if (gated) {
          linear(ff + ".DenseReluDense.wi_0.weight", ffn, H, false);
          linear(ff + ".DenseReluDense.wi_1.weight", ffn, H, false);
        } else {
          linear(ff + ".DenseReluDense.wi.weight", ffn, H, false);
        }
        linear(ff + ".DenseReluDense.wo.weight", H, ffn, false);
      }
      w.add(std::string(stack) + ".block.0.layer.0.SelfAttention.relative_attention_bias.weight",
            {c.buckets, c.enc_heads}, 1.0);
      norm(std::string(stack) + ".final_layer_norm", false);
    }
    if (!c.tied) linear("lm_head.weight", V, H, false);
    return w;
  }
  w.add("model.shared.weight", {V, H}, 1.0 / std::sqrt(static_cast<double>(H)));
  for (const char* stack : {"encoder", "decoder"}) {
    const bool enc = std::string(stack) == "encoder";
    const int layers = enc ? c.enc_layers : c.dec_layers;
    const std::int64_t inner = H;
    const std::int64_t ffn = enc ? c.enc_ffn : c.dec_ffn;
    for (int l = 0; l < layers; ++l) {
      const std::string p = "model." + std::string(stack) + ".layers." + std::to_string(l) + ".";
      norm(p + "self_attn_layer_norm", true);
      attention(m2m_attn(stack, l, "self_attn"), inner, true);
      if (!enc) {
        norm(p + "encoder_attn_layer_norm", true);
        attention(m2m_attn(stack, l, "encoder_attn"), inner, true);
      }
      norm(p + "final_layer_norm", true);
      linear(p + "fc1.weight", ffn, H, true);
      linear(p + "fc2.weight", H, ffn, true);
    }
    norm("model." + std::string(stack) + ".layer_norm", true);
  }
  return w;
}

// transformers' T5Attention._relative_position_bucket, in double.
inline int reference_bucket(int rel, bool bidirectional, int buckets, int max_distance) {
  int out = 0;
  int n = 0;
  if (bidirectional) {
    buckets /= 2;
    if (rel > 0) out += buckets;
    n = std::abs(rel);
  } else {
    n = std::max(-rel, 0);
  }
  const int exact = buckets / 2;
  if (n < exact) return out + n;
  const double large = exact + std::log(static_cast<double>(n) / exact) /
                                   std::log(static_cast<double>(max_distance) / exact) *
                                   (buckets - exact);
  return out + std::min(static_cast<int>(large), buckets - 1);
}

class Reference {
 public:
  Reference(const Config& c, const Weights& w) : c_(c), w_(w) {}

  // The encoder's last hidden states (after its final norm).
  std::vector<Vec> encode(const std::vector<int>& src) const {
    std::vector<Vec> x = embed(src);
    for (int l = 0; l < c_.enc_layers; ++l) {
      add(x, attention(norm_all(x, enc_norm(l, 0)), norm_all(x, enc_norm(l, 0)), attn(true, l, 0),
                       c_.enc_heads, c_.enc_hd, false, c_.t5() ? "encoder" : ""));
      add(x, mlp(norm_all(x, enc_norm(l, 1)), true, l));
    }
    return norm_all(
        x, c_.t5() ? "encoder.final_layer_norm.weight" : "model.encoder.layer_norm.weight");
  }

  // Logits of every decoder position (teacher forced over `dec`).
  std::vector<Vec> decode(const std::vector<Vec>& enc, const std::vector<int>& dec) const {
    std::vector<Vec> x = embed(dec);
    for (int l = 0; l < c_.dec_layers; ++l) {
      auto h = norm_all(x, dec_norm(l, 0));
      add(x, attention(h, h, attn(false, l, 0), c_.dec_heads, c_.dec_hd, true,
                       c_.t5() ? "decoder" : ""));
      add(x, attention(norm_all(x, dec_norm(l, 1)), enc, attn(false, l, 1), c_.dec_heads, c_.dec_hd,
                       false, ""));
      add(x, mlp(norm_all(x, dec_norm(l, 2)), false, l));
    }
    auto h = norm_all(
        x, c_.t5() ? "decoder.final_layer_norm.weight" : "model.decoder.layer_norm.weight");
    const std::string head =
        c_.tied ? (c_.t5() ? "shared.weight" : "model.shared.weight") : "lm_head.weight";
    const double scale = c_.t5() && c_.tied ? 1.0 / std::sqrt(static_cast<double>(c_.hidden)) : 1;
    std::vector<Vec> logits;
    for (auto& row : h) {
      Vec out(static_cast<std::size_t>(c_.vocab));
      for (int v = 0; v < c_.vocab; ++v) {
        double s = 0;
        for (int j = 0; j < c_.hidden; ++j)
          s += w_.at(head, static_cast<std::int64_t>(v) * c_.hidden + j) * row[j] * scale;
        out[static_cast<std::size_t>(v)] = s;
      }
      logits.push_back(std::move(out));
    }
    return logits;
  }

 private:
  std::string enc_norm(int l, int which) const {
    if (c_.t5()) {
      return "encoder.block." + std::to_string(l) + ".layer." + std::to_string(which) +
             ".layer_norm.weight";
    }
    return "model.encoder.layers." + std::to_string(l) +
           (which == 0 ? ".self_attn_layer_norm.weight" : ".final_layer_norm.weight");
  }
  std::string dec_norm(int l, int which) const {
    if (c_.t5()) {
      return "decoder.block." + std::to_string(l) + ".layer." + std::to_string(which) +
             ".layer_norm.weight";
    }
    const char* names[] = {".self_attn_layer_norm.weight", ".encoder_attn_layer_norm.weight",
                           ".final_layer_norm.weight"};
    return "model.decoder.layers." + std::to_string(l) + names[which];
  }
  AttnNames attn(bool enc, int l, int which) const {
    if (c_.t5()) {
      return t5_attn(enc ? "encoder" : "decoder", l, which,
                     which == 0 ? "SelfAttention" : "EncDecAttention");
    }
    return m2m_attn(enc ? "encoder" : "decoder", l, which == 0 ? "self_attn" : "encoder_attn");
  }

  std::string bias_of(const std::string& weight) const {
    return weight.substr(0, weight.size() - 6) + "bias";
  }

  Vec linear(const std::string& weight, const Vec& x, int out) const {
    Vec y(static_cast<std::size_t>(out), 0.0);
    const auto in = static_cast<std::int64_t>(x.size());
    const bool bias = w_.has(bias_of(weight));
    for (int o = 0; o < out; ++o) {
      double s = bias ? w_.at(bias_of(weight), o) : 0.0;
      for (std::int64_t i = 0; i < in; ++i)
        s += w_.at(weight, o * in + i) * x[static_cast<std::size_t>(i)];
      y[static_cast<std::size_t>(o)] = s;
    }
    return y;
  }

  std::vector<Vec> norm_all(const std::vector<Vec>& x, const std::string& name) const {
    std::vector<Vec> out;
    for (const auto& row : x) {
      out.push_back(c_.t5() ? zoo::rms_norm(row, w_, name, 1e-6, 0.0)
                            : zoo::layer_norm(row, w_, name, 1e-5));
    }
    return out;
  }

  static void add(std::vector<Vec>& x, const std::vector<Vec>& y) {
    for (std::size_t t = 0; t < x.size(); ++t)
      for (std::size_t j = 0; j < x[t].size(); ++j)
        x[t][j] += y[t][j];
  }

  std::vector<Vec> embed(const std::vector<int>& tokens) const {
    std::vector<Vec> x;
    const std::string table = c_.t5() ? "shared.weight" : "model.shared.weight";
    const double scale = c_.t5() ? 1.0 : std::sqrt(static_cast<double>(c_.hidden));
    const int half = c_.hidden / 2;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      Vec row(static_cast<std::size_t>(c_.hidden));
      for (int j = 0; j < c_.hidden; ++j)
        row[static_cast<std::size_t>(j)] =
            w_.at(table, static_cast<std::int64_t>(tokens[i]) * c_.hidden + j) * scale;
      if (!c_.t5()) {
        // M2M100: row padding_idx + 1 + i of sin | cos with frequencies 10000^(-j / (half - 1)).
        const double p = c_.pad + 1 + static_cast<double>(i);
        for (int j = 0; j < half; ++j) {
          const double f = std::exp(-j * std::log(10000.0) / (half - 1));
          row[static_cast<std::size_t>(j)] += std::sin(p * f);
          row[static_cast<std::size_t>(half + j)] += std::cos(p * f);
        }
      }
      x.push_back(std::move(row));
    }
    return x;
  }

  std::vector<Vec> attention(const std::vector<Vec>& xq, const std::vector<Vec>& xkv,
                             const AttnNames& n, int heads, int hd, bool causal,
                             const std::string& relative_stack) const {
    const int inner = heads * hd;
    std::vector<Vec> q, k, v;
    for (const auto& x : xq)
      q.push_back(linear(n.q, x, inner));
    for (const auto& x : xkv) {
      k.push_back(linear(n.k, x, inner));
      v.push_back(linear(n.v, x, inner));
    }
    const double scale = c_.t5() ? 1.0 : 1.0 / std::sqrt(static_cast<double>(hd));
    const std::string table =
        relative_stack.empty()
            ? ""
            : relative_stack + ".block.0.layer.0.SelfAttention.relative_attention_bias.weight";
    std::vector<Vec> out;
    for (std::size_t i = 0; i < q.size(); ++i) {
      Vec o(static_cast<std::size_t>(inner), 0.0);
      const std::size_t last = causal ? i : k.size() - 1;
      for (int h = 0; h < heads; ++h) {
        Vec s(last + 1);
        double top = -1e300;
        for (std::size_t j = 0; j <= last; ++j) {
          double d = 0;
          for (int e = 0; e < hd; ++e)
            d += q[i][static_cast<std::size_t>(h * hd + e)] *
                 k[j][static_cast<std::size_t>(h * hd + e)];
          s[j] = d * scale;
          if (!table.empty()) {
            const int b = reference_bucket(static_cast<int>(j) - static_cast<int>(i), !causal,
                                           c_.buckets, c_.max_distance);
            s[j] += w_.at(table, static_cast<std::int64_t>(b) * heads + h);
          }
          top = std::max(top, s[j]);
        }
        double z = 0;
        for (auto& e : s) {
          e = std::exp(e - top);
          z += e;
        }
        for (std::size_t j = 0; j <= last; ++j)
          for (int e = 0; e < hd; ++e)
            o[static_cast<std::size_t>(h * hd + e)] +=
                s[j] / z * v[j][static_cast<std::size_t>(h * hd + e)];
      }
      out.push_back(linear(n.o, o, c_.hidden));
    }
    return out;
  }

  std::vector<Vec> mlp(const std::vector<Vec>& x, bool enc, int l) const {
    std::vector<Vec> out;
    const int ffn = enc ? c_.enc_ffn : c_.dec_ffn;
    for (const auto& row : x) {
      Vec hidden;
      if (c_.t5()) {
        const std::string p = std::string(enc ? "encoder" : "decoder") + ".block." +
                              std::to_string(l) + ".layer." + (enc ? "1" : "2") +
                              ".DenseReluDense.";
        if (c_.kind == Kind::kT5Gated) {
          Vec g = linear(p + "wi_0.weight", row, ffn);
          const Vec u = linear(p + "wi_1.weight", row, ffn);
          for (std::size_t i = 0; i < g.size(); ++i) {
            const double a = g[i];
            const double gelu =
                0.5 * a * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a)));
            g[i] = gelu * u[i];
          }
          hidden = g;
        } else {
          hidden = linear(p + "wi.weight", row, ffn);
          for (auto& e : hidden)
            e = std::max(e, 0.0);
        }
        out.push_back(linear(p + "wo.weight", hidden, c_.hidden));
      } else {
        const std::string p = "model." + std::string(enc ? "encoder" : "decoder") + ".layers." +
                              std::to_string(l) + ".";
        hidden = linear(p + "fc1.weight", row, ffn);
        for (auto& e : hidden)
          e = std::max(e, 0.0);
        out.push_back(linear(p + "fc2.weight", hidden, c_.hidden));
      }
    }
    return out;
  }

  Config c_;
  const Weights& w_;
};

}  // namespace weft::testing::seq2seq
