#pragma once
// The zoo families as tiny in-memory checkpoints: a config.json as transformers writes it, and
// random weights named and shaped as it saves them (zoo_reference.hpp computes their logits
// independently). Shared by zoo_blocks_test (CPU) and cuda/zoo_cuda_test (GPU against CPU).

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <ostream>
#include <string>

#include "loaders/model_loader.hpp"
#include "loaders/model_spec_file.hpp"
#include "runtime/model/model.hpp"
#include "tests/runtime/model/zoo_reference.hpp"

namespace weft::testing::zoo {

namespace fs = std::filesystem;

struct Case {
  const char* name;
  Family family;
  const char* spec_file;
};

inline void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

inline std::string config_json(Family f, const Dims& d) {
  auto n = [](int v) { return std::to_string(v); };
  switch (f) {
    case Family::kGpt2:
      return R"({"architectures":["GPT2LMHeadModel"],"model_type":"gpt2","vocab_size":)" +
             n(d.vocab) + R"(,"n_embd":)" + n(d.hidden) + R"(,"n_layer":)" + n(d.layers) +
             R"(,"n_head":)" + n(d.heads) + R"(,"n_positions":)" + n(d.max_pos) +
             R"(,"n_inner":null,"activation_function":"gelu_new","layer_norm_epsilon":1e-5})";
    case Family::kOpt:
    case Family::kOptPost:
      return R"({"architectures":["OPTForCausalLM"],"model_type":"opt","vocab_size":)" +
             n(d.vocab) + R"(,"hidden_size":)" + n(d.hidden) + R"(,"ffn_dim":)" + n(d.inter) +
             R"(,"num_hidden_layers":)" + n(d.layers) + R"(,"num_attention_heads":)" + n(d.heads) +
             R"(,"max_position_embeddings":)" + n(d.max_pos) + R"(,"do_layer_norm_before":)" +
             (f == Family::kOpt ? "true" : "false") +
             R"(,"activation_function":"relu","enable_bias":true,"word_embed_proj_dim":)" +
             n(d.hidden) + "}";
    case Family::kGemma:
      return R"({"architectures":["GemmaForCausalLM"],"model_type":"gemma","vocab_size":)" +
             n(d.vocab) + R"(,"hidden_size":)" + n(d.hidden) + R"(,"intermediate_size":)" +
             n(d.inter) + R"(,"num_hidden_layers":)" + n(d.layers) + R"(,"num_attention_heads":)" +
             n(d.heads) + R"(,"num_key_value_heads":1,"head_dim":)" + n(d.head_dim) +
             R"(,"hidden_act":"gelu","hidden_activation":"gelu_pytorch_tanh","rms_norm_eps":1e-6,"rope_theta":10000.0})";
    case Family::kPhi3:
      return R"({"architectures":["Phi3ForCausalLM"],"model_type":"phi3","vocab_size":)" +
             n(d.vocab) + R"(,"hidden_size":)" + n(d.hidden) + R"(,"intermediate_size":)" +
             n(d.inter) + R"(,"num_hidden_layers":)" + n(d.layers) + R"(,"num_attention_heads":)" +
             n(d.heads) +
             R"(,"num_key_value_heads":2,"rms_norm_eps":1e-5,"rope_theta":10000.0,"max_position_embeddings":)" +
             n(d.max_pos) + R"(,"original_max_position_embeddings":)" + n(d.orig_max) +
             R"(,"rope_scaling":{"type":"longrope","short_factor":[1.0,1.5],"long_factor":[2.0,4.0]}})";
    case Family::kBloom:
      return R"({"architectures":["BloomForCausalLM"],"model_type":"bloom","vocab_size":)" +
             n(d.vocab) + R"(,"hidden_size":)" + n(d.hidden) + R"(,"n_layer":)" + n(d.layers) +
             R"(,"n_head":)" + n(d.heads) + R"(,"layer_norm_epsilon":1e-5})";
    case Family::kFalcon:
      return R"({"architectures":["FalconForCausalLM"],"model_type":"falcon","vocab_size":)" +
             n(d.vocab) + R"(,"hidden_size":)" + n(d.hidden) + R"(,"num_hidden_layers":)" +
             n(d.layers) + R"(,"num_attention_heads":)" + n(d.heads) +
             R"(,"num_kv_heads":2,"new_decoder_architecture":true,"parallel_attn":true,"bias":false,"alibi":false,"multi_query":true,"layer_norm_epsilon":1e-5})";
    case Family::kFalconMqa:
      return R"({"architectures":["FalconForCausalLM"],"model_type":"falcon","vocab_size":)" +
             n(d.vocab) + R"(,"hidden_size":)" + n(d.hidden) + R"(,"num_hidden_layers":)" +
             n(d.layers) + R"(,"num_attention_heads":)" + n(d.heads) +
             R"(,"new_decoder_architecture":false,"multi_query":true,"parallel_attn":true,"bias":true,"alibi":false,"layer_norm_epsilon":1e-5})";
  }
  return "{}";
}

// The checkpoint's tensors as transformers names and shapes them.
inline Weights make_weights(Family f, const Dims& d) {
  Weights w;
  const std::int64_t H = d.hidden, V = d.vocab, I = d.inter, D = d.head_dim;
  const double lin = 1.0 / std::sqrt(static_cast<double>(H));
  auto norm = [&](const std::string& name, bool bias, double mean = 1.0) {
    w.add(name + ".weight", {H}, 0.2, mean);
    if (bias) w.add(name + ".bias", {H}, 0.2);
  };
  auto linear = [&](const std::string& name, std::int64_t out, std::int64_t in, bool bias) {
    w.add(name + ".weight", {out, in}, 1.0 / std::sqrt(static_cast<double>(in)));
    if (bias) w.add(name + ".bias", {out}, 0.2);
  };
  for (int l = 0; l < d.layers; ++l) {
    const std::string L = std::to_string(l);
    switch (f) {
      case Family::kGpt2: {
        const std::string p = "transformer.h." + L + ".";
        norm(p + "ln_1", true);
        norm(p + "ln_2", true);
        // Conv1D: [in, out]
        w.add(p + "attn.c_attn.weight", {H, 3 * H}, lin);
        w.add(p + "attn.c_attn.bias", {3 * H}, 0.2);
        w.add(p + "attn.c_proj.weight", {H, H}, lin);
        w.add(p + "attn.c_proj.bias", {H}, 0.2);
        w.add(p + "mlp.c_fc.weight", {H, 4 * H}, lin);
        w.add(p + "mlp.c_fc.bias", {4 * H}, 0.2);
        w.add(p + "mlp.c_proj.weight", {4 * H, H}, 0.5 / static_cast<double>(H));
        w.add(p + "mlp.c_proj.bias", {H}, 0.2);
        break;
      }
      case Family::kOpt:
      case Family::kOptPost: {
        const std::string p = "model.decoder.layers." + L + ".";
        norm(p + "self_attn_layer_norm", true);
        norm(p + "final_layer_norm", true);
        for (const char* m : {"q_proj", "k_proj", "v_proj", "out_proj"})
          linear(p + "self_attn." + m, H, H, true);
        linear(p + "fc1", I, H, true);
        linear(p + "fc2", H, I, true);
        break;
      }
      case Family::kGemma: {
        const std::string p = "model.layers." + L + ".";
        norm(p + "input_layernorm", false, 0.0);
        norm(p + "post_attention_layernorm", false, 0.0);
        linear(p + "self_attn.q_proj", d.heads * D, H, false);
        linear(p + "self_attn.k_proj", D, H, false);
        linear(p + "self_attn.v_proj", D, H, false);
        linear(p + "self_attn.o_proj", H, d.heads * D, false);
        linear(p + "mlp.gate_proj", I, H, false);
        linear(p + "mlp.up_proj", I, H, false);
        linear(p + "mlp.down_proj", H, I, false);
        break;
      }
      case Family::kPhi3: {
        const std::string p = "model.layers." + L + ".";
        norm(p + "input_layernorm", false);
        norm(p + "post_attention_layernorm", false);
        linear(p + "self_attn.qkv_proj", (d.heads + 2 * 2) * D, H, false);
        linear(p + "self_attn.o_proj", H, d.heads * D, false);
        linear(p + "mlp.gate_up_proj", 2 * I, H, false);
        linear(p + "mlp.down_proj", H, I, false);
        break;
      }
      case Family::kBloom: {
        const std::string p = "transformer.h." + L + ".";
        norm(p + "input_layernorm", true);
        norm(p + "post_attention_layernorm", true);
        linear(p + "self_attention.query_key_value", 3 * H, H, true);
        linear(p + "self_attention.dense", H, H, true);
        linear(p + "mlp.dense_h_to_4h", 4 * H, H, true);
        linear(p + "mlp.dense_4h_to_h", H, 4 * H, true);
        break;
      }
      case Family::kFalcon:
      case Family::kFalconMqa: {
        const std::string p = "transformer.h." + L + ".";
        const bool mqa = f == Family::kFalconMqa;
        if (mqa) {
          norm(p + "input_layernorm", true);
        } else {
          norm(p + "ln_attn", true);
          norm(p + "ln_mlp", true);
        }
        const int kv = mqa ? 1 : 2;
        linear(p + "self_attention.query_key_value", (d.heads + 2 * kv) * D, H, mqa);
        linear(p + "self_attention.dense", H, H, mqa);
        linear(p + "mlp.dense_h_to_4h", 4 * H, H, mqa);
        linear(p + "mlp.dense_4h_to_h", H, 4 * H, mqa);
        break;
      }
    }
  }
  switch (f) {
    case Family::kGpt2:
      w.add("transformer.wte.weight", {V, H}, 1.0);
      w.add("transformer.wpe.weight", {d.max_pos, H}, 0.5);
      norm("transformer.ln_f", true);
      break;
    case Family::kOpt:
    case Family::kOptPost:
      w.add("model.decoder.embed_tokens.weight", {V, H}, 1.0);
      w.add("model.decoder.embed_positions.weight", {d.max_pos + 2, H}, 0.5);
      if (f == Family::kOpt) norm("model.decoder.final_layer_norm", true);
      linear("lm_head", V, H, false);  // tied: must be ignored
      break;
    case Family::kGemma:
      w.add("model.embed_tokens.weight", {V, H}, 0.3);
      norm("model.norm", false, 0.0);
      break;
    case Family::kPhi3:
      w.add("model.embed_tokens.weight", {V, H}, 1.0);
      norm("model.norm", false);
      linear("lm_head", V, H, false);
      break;
    case Family::kBloom:
      w.add("transformer.word_embeddings.weight", {V, H}, 1.0);
      norm("transformer.word_embeddings_layernorm", true);
      norm("transformer.ln_f", true);
      break;
    case Family::kFalcon:
    case Family::kFalconMqa:
      w.add("transformer.word_embeddings.weight", {V, H}, 1.0);
      norm("transformer.ln_f", true);
      break;
  }
  return w;
}

struct Built {
  model::ModelSpec spec;
  std::shared_ptr<Weights> weights;
  model::Model model;
};

inline Built build(const Case& c, const Dims& d) {
  const fs::path dir = fs::temp_directory_path() / ("weft_zoo_" + std::string(c.name));
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config_json(c.family, d);
  auto file = find_spec_file(default_spec_dir(), dir / "config.json");
  if (!file) throw file.error();
  EXPECT_EQ(file->filename(), c.spec_file);
  auto spec = read_model_spec(*file, dir / "config.json");
  if (!spec) throw spec.error();
  auto w = std::make_shared<Weights>(make_weights(c.family, d));
  model::WeightLookup lookup{[w](const std::string& name) -> const TensorView* {
                               auto it = w->map.find(name);
                               return it == w->map.end() ? nullptr : &it->second;
                             },
                             [](const std::string&) { return std::string("memory"); }, "memory"};
  auto m = model::Model::create(*spec, lookup);
  if (!m) throw m.error();
  return {*spec, w, std::move(m.value())};
}

inline const std::vector<Case>& cases() {
  static const std::vector<Case> all{{"gpt2", Family::kGpt2, "gpt2.json"},
                                     {"opt", Family::kOpt, "opt.json"},
                                     {"opt_post_norm", Family::kOptPost, "opt.json"},
                                     {"gemma", Family::kGemma, "gemma.json"},
                                     {"phi3", Family::kPhi3, "phi3.json"},
                                     {"bloom", Family::kBloom, "bloom.json"},
                                     {"falcon", Family::kFalcon, "falcon.json"},
                                     {"falcon_mqa_bias", Family::kFalconMqa, "falcon.json"}};
  return all;
}

}  // namespace weft::testing::zoo
