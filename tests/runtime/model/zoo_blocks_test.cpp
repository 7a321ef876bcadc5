// Each zoo family's spec file + Weft's CPU forward against a plain reference written from the
// Hugging Face modeling semantics (zoo_reference.hpp), on random weights laid out and named as
// transformers saves them. The transformers-made fixtures (zoo_fixture_test.cpp) check the
// same against transformers itself once they are generated; this test needs nothing external.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "kernels/cpu/embedding.hpp"
#include "kernels/cpu/paged_attention.hpp"
#include "kernels/cpu/vector_math.hpp"
#include "loaders/model_loader.hpp"
#include "loaders/model_spec_file.hpp"
#include "runtime/model/alibi.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/rope_frequencies.hpp"
#include "tests/runtime/model/zoo_models.hpp"

namespace weft {
namespace {

namespace fs = std::filesystem;
using testing::zoo::Case;
using testing::zoo::Dims;
using testing::zoo::Family;
using testing::zoo::Vec;
using testing::zoo::Weights;
namespace ref = testing::zoo;

// The reference forward over one sequence: logits of every position.
std::vector<Vec> reference(Family f, const Dims& d, const Weights& w,
                           const std::vector<int>& tokens) {
  const int T = static_cast<int>(tokens.size());
  const int H = d.hidden, D = d.head_dim, NH = d.heads;
  const bool gpt2 = f == Family::kGpt2, opt = f == Family::kOpt || f == Family::kOptPost;
  const bool falcon = f == Family::kFalcon || f == Family::kFalconMqa;
  std::string emb_name = gpt2  ? "transformer.wte.weight"
                         : opt ? "model.decoder.embed_tokens.weight"
                         : (f == Family::kGemma || f == Family::kPhi3)
                             ? "model.embed_tokens.weight"
                             : "transformer.word_embeddings.weight";
  std::vector<Vec> x(static_cast<std::size_t>(T), Vec(static_cast<std::size_t>(H)));
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < H; ++i) {
      double e =
          w.at(emb_name, static_cast<std::int64_t>(tokens[static_cast<std::size_t>(t)]) * H + i);
      if (f == Family::kGemma) e *= std::sqrt(static_cast<double>(H));
      if (gpt2) e += w.at("transformer.wpe.weight", t * H + i);
      if (opt) e += w.at("model.decoder.embed_positions.weight", (t + 2) * H + i);
      x[static_cast<std::size_t>(t)][static_cast<std::size_t>(i)] = e;
    }
    if (f == Family::kBloom) {
      x[static_cast<std::size_t>(t)] = ref::layer_norm(
          x[static_cast<std::size_t>(t)], w, "transformer.word_embeddings_layernorm.weight", 1e-5);
    }
  }
  // rope frequencies (half-split), theta 10000
  Vec inv_freq;
  double attn_factor = 1.0;
  for (int i = 0; i < D / 2; ++i) {
    double fr = std::pow(10000.0, -2.0 * i / D);
    if (f == Family::kPhi3) {
      fr /= (T > d.orig_max ? d.long_factor : d.short_factor)[static_cast<std::size_t>(i)];
    }
    inv_freq.push_back(fr);
  }
  if (f == Family::kPhi3) {
    const double factor = static_cast<double>(d.max_pos) / d.orig_max;
    attn_factor = std::sqrt(1.0 + std::log(factor) / std::log(static_cast<double>(d.orig_max)));
  }
  const bool uses_rope = f == Family::kGemma || f == Family::kPhi3 || falcon;
  const Vec slopes = ref::bloom_slopes(NH);
  const int KV = f == Family::kGemma       ? 1
                 : f == Family::kPhi3      ? 2
                 : f == Family::kFalcon    ? 2
                 : f == Family::kFalconMqa ? 1
                                           : NH;

  for (int l = 0; l < d.layers; ++l) {
    const std::string L = std::to_string(l);
    ref::Rows rows;
    std::vector<Vec> normed(static_cast<std::size_t>(T)), mlp_in(static_cast<std::size_t>(T));
    for (int t = 0; t < T; ++t) {
      const Vec& xt = x[static_cast<std::size_t>(t)];
      Vec a, q, k, v;
      switch (f) {
        case Family::kGpt2: {
          a = ref::layer_norm(xt, w, "transformer.h." + L + ".ln_1.weight", 1e-5);
          const Vec qkv = ref::linear(a, w, "transformer.h." + L + ".attn.c_attn.weight", true);
          q.assign(qkv.begin(), qkv.begin() + H);
          k.assign(qkv.begin() + H, qkv.begin() + 2 * H);
          v.assign(qkv.begin() + 2 * H, qkv.end());
          break;
        }
        case Family::kOpt:
        case Family::kOptPost: {
          const std::string p = "model.decoder.layers." + L + ".self_attn";
          a = f == Family::kOpt
                  ? ref::layer_norm(
                        xt, w, "model.decoder.layers." + L + ".self_attn_layer_norm.weight", 1e-5)
                  : xt;
          q = ref::linear(a, w, p + ".q_proj.weight");
          k = ref::linear(a, w, p + ".k_proj.weight");
          v = ref::linear(a, w, p + ".v_proj.weight");
          break;
        }
        case Family::kGemma: {
          const std::string p = "model.layers." + L + ".";
          a = ref::rms_norm(xt, w, p + "input_layernorm.weight", 1e-6, 1.0);
          q = ref::linear(a, w, p + "self_attn.q_proj.weight");
          k = ref::linear(a, w, p + "self_attn.k_proj.weight");
          v = ref::linear(a, w, p + "self_attn.v_proj.weight");
          break;
        }
        case Family::kPhi3: {
          const std::string p = "model.layers." + L + ".";
          a = ref::rms_norm(xt, w, p + "input_layernorm.weight", 1e-5, 0.0);
          const Vec qkv = ref::linear(a, w, p + "self_attn.qkv_proj.weight");
          q.assign(qkv.begin(), qkv.begin() + NH * D);
          k.assign(qkv.begin() + NH * D, qkv.begin() + (NH + 2) * D);
          v.assign(qkv.begin() + (NH + 2) * D, qkv.end());
          break;
        }
        case Family::kBloom: {
          const std::string p = "transformer.h." + L + ".";
          a = ref::layer_norm(xt, w, p + "input_layernorm.weight", 1e-5);
          const Vec qkv = ref::linear(a, w, p + "self_attention.query_key_value.weight");
          for (int h = 0; h < NH; ++h) {  // [heads, 3, head_dim]
            auto at = [&](int which) { return qkv.begin() + (h * 3 + which) * D; };
            q.insert(q.end(), at(0), at(0) + D);
            k.insert(k.end(), at(1), at(1) + D);
            v.insert(v.end(), at(2), at(2) + D);
          }
          break;
        }
        case Family::kFalcon:
        case Family::kFalconMqa: {
          const std::string p = "transformer.h." + L + ".";
          const bool mqa = f == Family::kFalconMqa;
          a = ref::layer_norm(xt, w, p + (mqa ? "input_layernorm.weight" : "ln_attn.weight"), 1e-5);
          mlp_in[static_cast<std::size_t>(t)] =
              mqa ? a : ref::layer_norm(xt, w, p + "ln_mlp.weight", 1e-5);
          const Vec qkv = ref::linear(a, w, p + "self_attention.query_key_value.weight");
          const int group = NH / KV;  // [kv_heads, group + 2, head_dim]
          for (int g = 0; g < KV; ++g) {
            auto at = [&](int slot) { return qkv.begin() + (g * (group + 2) + slot) * D; };
            for (int j = 0; j < group; ++j)
              q.insert(q.end(), at(j), at(j) + D);
            k.insert(k.end(), at(group), at(group) + D);
            v.insert(v.end(), at(group + 1), at(group + 1) + D);
          }
          break;
        }
      }
      if (uses_rope) {
        ref::rope(q, NH, D, t, inv_freq, attn_factor);
        ref::rope(k, KV, D, t, inv_freq, attn_factor);
      }
      normed[static_cast<std::size_t>(t)] = a;
      rows.q.push_back(q);
      rows.k.push_back(k);
      rows.v.push_back(v);
    }
    const auto att = ref::attention(rows, NH, KV, D, f == Family::kBloom ? &slopes : nullptr);
    for (int t = 0; t < T; ++t) {
      Vec& xt = x[static_cast<std::size_t>(t)];
      const Vec& at = att[static_cast<std::size_t>(t)];
      auto add = [&](const Vec& y) {
        for (int i = 0; i < H; ++i)
          xt[static_cast<std::size_t>(i)] += y[static_cast<std::size_t>(i)];
      };
      switch (f) {
        case Family::kGpt2: {
          const std::string p = "transformer.h." + L + ".";
          add(ref::linear(at, w, p + "attn.c_proj.weight", true));
          Vec m = ref::linear(ref::layer_norm(xt, w, p + "ln_2.weight", 1e-5), w,
                              p + "mlp.c_fc.weight", true);
          for (auto& e : m)
            e = ref::gelu_tanh(e);
          add(ref::linear(m, w, p + "mlp.c_proj.weight", true));
          break;
        }
        case Family::kOpt:
        case Family::kOptPost: {
          const std::string p = "model.decoder.layers." + L + ".";
          const bool pre = f == Family::kOpt;
          add(ref::linear(at, w, p + "self_attn.out_proj.weight"));
          if (!pre) xt = ref::layer_norm(xt, w, p + "self_attn_layer_norm.weight", 1e-5);
          Vec m =
              ref::linear(pre ? ref::layer_norm(xt, w, p + "final_layer_norm.weight", 1e-5) : xt, w,
                          p + "fc1.weight");
          for (auto& e : m)
            e = std::max(0.0, e);
          add(ref::linear(m, w, p + "fc2.weight"));
          if (!pre) xt = ref::layer_norm(xt, w, p + "final_layer_norm.weight", 1e-5);
          break;
        }
        case Family::kGemma:
        case Family::kPhi3: {
          const std::string p = "model.layers." + L + ".";
          const bool gemma = f == Family::kGemma;
          add(ref::linear(at, w, p + "self_attn.o_proj.weight"));
          const Vec n = ref::rms_norm(xt, w, p + "post_attention_layernorm.weight",
                                      gemma ? 1e-6 : 1e-5, gemma ? 1.0 : 0.0);
          Vec gate, up;
          if (gemma) {
            gate = ref::linear(n, w, p + "mlp.gate_proj.weight");
            up = ref::linear(n, w, p + "mlp.up_proj.weight");
          } else {
            const Vec gu = ref::linear(n, w, p + "mlp.gate_up_proj.weight");
            gate.assign(gu.begin(), gu.begin() + d.inter);
            up.assign(gu.begin() + d.inter, gu.end());
          }
          for (std::size_t i = 0; i < gate.size(); ++i)
            gate[i] = (gemma ? ref::gelu_tanh(gate[i]) : ref::silu(gate[i])) * up[i];
          add(ref::linear(gate, w, p + "mlp.down_proj.weight"));
          break;
        }
        case Family::kBloom: {
          const std::string p = "transformer.h." + L + ".";
          add(ref::linear(at, w, p + "self_attention.dense.weight"));
          Vec m = ref::linear(ref::layer_norm(xt, w, p + "post_attention_layernorm.weight", 1e-5),
                              w, p + "mlp.dense_h_to_4h.weight");
          for (auto& e : m)
            e = ref::gelu_tanh(e);
          add(ref::linear(m, w, p + "mlp.dense_4h_to_h.weight"));
          break;
        }
        case Family::kFalcon:
        case Family::kFalconMqa: {
          const std::string p = "transformer.h." + L + ".";
          Vec m =
              ref::linear(mlp_in[static_cast<std::size_t>(t)], w, p + "mlp.dense_h_to_4h.weight");
          for (auto& e : m)
            e = ref::gelu_erf(e);
          add(ref::linear(m, w, p + "mlp.dense_4h_to_h.weight"));
          add(ref::linear(at, w, p + "self_attention.dense.weight"));
          break;
        }
      }
    }
  }
  std::vector<Vec> logits;
  for (int t = 0; t < T; ++t) {
    Vec h = x[static_cast<std::size_t>(t)];
    std::string head = emb_name;
    switch (f) {
      case Family::kGpt2:
      case Family::kBloom:
      case Family::kFalcon:
      case Family::kFalconMqa:
        h = ref::layer_norm(h, w, "transformer.ln_f.weight", 1e-5);
        break;
      case Family::kOpt:
        h = ref::layer_norm(h, w, "model.decoder.final_layer_norm.weight", 1e-5);
        break;
      case Family::kOptPost:
        break;
      case Family::kGemma:
        h = ref::rms_norm(h, w, "model.norm.weight", 1e-6, 1.0);
        break;
      case Family::kPhi3:
        h = ref::rms_norm(h, w, "model.norm.weight", 1e-5, 0.0);
        head = "lm_head.weight";
        break;
    }
    logits.push_back(ref::linear(h, w, head));
  }
  return logits;
}

void expect_rows_close(const std::vector<float>& got, const std::vector<Vec>& want, int vocab,
                       std::size_t first_row, const std::string& what) {
  for (std::size_t r = 0; r * vocab < got.size(); ++r) {
    const Vec& w = want[first_row + r];
    double max_ref = 0, max_err = 0;
    for (int i = 0; i < vocab; ++i) {
      max_ref = std::max(max_ref, std::fabs(w[static_cast<std::size_t>(i)]));
      max_err = std::max(max_err, std::fabs(got[r * vocab + i] - w[static_cast<std::size_t>(i)]));
    }
    EXPECT_LE(max_err, 2e-4 * std::max(1.0, max_ref)) << what << " row " << first_row + r;
  }
}

class ZooBlocks : public ::testing::TestWithParam<Case> {};

TEST_P(ZooBlocks, SpecFileAndCpuForwardMatchTheReference) {
  const Case c = GetParam();
  Dims d;
  if (c.family == Family::kGemma) d.head_dim = 8;  // q wider than hidden, as in Gemma-7B
  const auto b = testing::zoo::build(c, d);
  const std::vector<int> tokens{3, 17, 0, 29, 8, 8, 21};
  for (int len : {3, 7}) {  // Phi-3: 3 fits the original context (short factors), 7 does not
    const std::vector<int> prompt(tokens.begin(), tokens.begin() + len);
    const auto want = reference(c.family, d, *b.weights, prompt);
    for (auto path : {cpu::KernelPath::kScalar, cpu::KernelPath::kAuto}) {
      cpu::ThreadPool pool(2);
      model::KvCache kv(b.model.kv_layout(4), 8);
      model::StepBatch step;
      step.tokens = prompt;
      for (int i = 0; i < len; ++i)
        step.positions.push_back(i);
      model::SequenceSlice seq{0, len, {}, true};
      for (int p = 0; p < kv.pages_for(len); ++p)
        seq.page_table.push_back(*kv.allocate_page());
      step.sequences.push_back(seq);
      std::vector<float> logits;
      auto ok = b.model.forward(step, kv, logits, pool, path);
      ASSERT_TRUE(ok) << ok.error().what();
      expect_rows_close(logits, want, d.vocab, 0,
                        std::string(c.name) + " prefill of " + std::to_string(len));
    }
  }
  // Prefill 3 tokens, then decode the rest one by one through the KV pages (positions reach
  // the learned table and ALiBi's distances through the cache). longrope switches its factors
  // per step, so the full-recompute reference only holds for its prefill.
  if (c.family == Family::kPhi3) return;
  const auto want = reference(c.family, d, *b.weights, tokens);
  cpu::ThreadPool pool(2);
  model::KvCache kv(b.model.kv_layout(2), 8);
  model::SequenceSlice seq{0, 3, {}, false};
  for (int p = 0; p < kv.pages_for(static_cast<int>(tokens.size())); ++p)
    seq.page_table.push_back(*kv.allocate_page());
  model::StepBatch step{{tokens[0], tokens[1], tokens[2]}, {0, 1, 2}, {seq}};
  std::vector<float> logits;
  ASSERT_TRUE(b.model.forward(step, kv, logits, pool));
  expect_rows_close(logits, want, d.vocab, 2, std::string(c.name) + " chunk");
  for (int t = 3; t < static_cast<int>(tokens.size()); ++t) {
    step.tokens = {tokens[static_cast<std::size_t>(t)]};
    step.positions = {t};
    step.sequences[0].token_count = 1;
    auto ok = b.model.forward(step, kv, logits, pool);
    ASSERT_TRUE(ok) << ok.error().what();
    expect_rows_close(logits, want, d.vocab, static_cast<std::size_t>(t),
                      std::string(c.name) + " decode");
  }
}

// Writes the weights as one safetensors file, F32 or BF16 (the BF16 values rounded in `w` too,
// so the reference sees what the file holds).
void write_checkpoint(const fs::path& dir, Weights& w, bool bf16) {
  std::string header = "{";
  std::string data;
  for (auto& [name, t] : w.map) {
    std::vector<float> values(t.as<float>(), t.as<float>() + t.numel());
    const std::size_t begin = data.size();
    if (bf16) {
      for (auto& v : values) {
        const std::uint16_t bits = cpu::f32_to_bf16(v);
        v = cpu::bf16_to_f32(bits);
        data.append(reinterpret_cast<const char*>(&bits), 2);
      }
      t = make_f32_tensor(t.shape, values);
    } else {
      data.append(reinterpret_cast<const char*>(values.data()), values.size() * 4);
    }
    std::string shape;
    for (auto d : t.shape)
      shape += (shape.empty() ? "" : ",") + std::to_string(d);
    header += (header.size() > 1 ? "," : "") + std::string("\"") + name + "\":{\"dtype\":\"" +
              (bf16 ? "BF16" : "F32") + "\",\"shape\":[" + shape + "],\"data_offsets\":[" +
              std::to_string(begin) + "," + std::to_string(data.size()) + "]}";
  }
  header += "}";
  // BF16 data is left unpadded (an odd header length puts it at odd addresses: Model::create
  // copies such tensors to aligned memory before transposing or reordering them).
  if (!bf16) header.append((8 - header.size() % 8) % 8, ' ');
  std::ofstream out(dir / "model.safetensors", std::ios::binary);
  const std::uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << data;
}

// The same families loaded from a folder (config.json + model.safetensors, F32 and BF16) the
// way `weft generate --model` loads them: the spec found by architecture, tensors mapped from
// the file, Conv1D and grouped qkv rewritten from 2-byte elements too.
TEST_P(ZooBlocks, LoadedFromAFolderInF32AndBf16) {
  const Case c = GetParam();
  Dims d;
  if (c.family == Family::kGemma) d.head_dim = 8;
  for (bool bf16 : {false, true}) {
    const fs::path dir = fs::temp_directory_path() /
                         ("weft_zoo_folder_" + std::string(c.name) + (bf16 ? "_bf16" : ""));
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << testing::zoo::config_json(c.family, d);
    Weights w = testing::zoo::make_weights(c.family, d);
    write_checkpoint(dir, w, bf16);
    auto loaded = load_model(dir);
    ASSERT_TRUE(loaded) << loaded.error().what();
    EXPECT_EQ(loaded->spec_file.filename(), c.spec_file);
    const std::vector<int> prompt{3, 17, 0, 29, 8, 8, 21};
    const auto want = reference(c.family, d, w, prompt);
    cpu::ThreadPool pool(2);
    model::KvCache kv(loaded->model.kv_layout(4), 8);
    model::SequenceSlice seq{0, 7, {}, true};
    for (int p = 0; p < kv.pages_for(7); ++p)
      seq.page_table.push_back(*kv.allocate_page());
    model::StepBatch step{prompt, {0, 1, 2, 3, 4, 5, 6}, {seq}};
    std::vector<float> logits;
    auto ok = loaded->model.forward(step, kv, logits, pool);
    ASSERT_TRUE(ok) << ok.error().what();
    expect_rows_close(logits, want, d.vocab, 0,
                      std::string(c.name) + (bf16 ? " bf16" : " f32") + " from a folder");
  }
}

// A position past the learned table is a bad step, not a read past the table.
TEST(ZooBlocks, PositionBeyondTheLearnedTableIsAnError) {
  Dims d;                                                           // max_pos 16
  const auto b = testing::zoo::build(testing::zoo::cases()[0], d);  // gpt2
  cpu::ThreadPool pool(1);
  model::KvCache kv(b.model.kv_layout(16), 4);
  model::SequenceSlice seq{0, 1, {*kv.allocate_page(), *kv.allocate_page()}, false};
  model::StepBatch step{{3}, {16}, {seq}};
  std::vector<float> logits;
  auto ok = b.model.forward(step, kv, logits, pool);
  ASSERT_FALSE(ok);
  EXPECT_NE(std::string(ok.error().what()).find("beyond the learned position table"),
            std::string::npos)
      << ok.error().what();
  step.positions = {15};
  EXPECT_TRUE(b.model.forward(step, kv, logits, pool));
}

// ALiBi slopes for a head count that is not a power of two take every other slope of the next
// power's sequence (BLOOM-176B has 112 heads).
TEST(ZooBlocks, AlibiSlopesMatchBloomsRecipe) {
  for (int heads : {1, 4, 6, 12, 112}) {
    const auto got = model::alibi_slopes(heads);
    const auto want = ref::bloom_slopes(heads);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-6 * want[i]) << heads << " heads, slope " << i;
  }
  const auto six = model::alibi_slopes(6);
  EXPECT_FLOAT_EQ(six[0], 0.25f);
  EXPECT_FLOAT_EQ(six[4], 0.5f);
  EXPECT_FLOAT_EQ(six[5], 0.125f);
}

// Attention with ALiBi on pages: scores shift by slope * (j - i), the same after softmax as
// BLOOM's slope * j.
TEST(ZooBlocks, PagedAttentionAddsAlibiBias) {
  const std::size_t D = 4, NH = 2, T = 5;
  std::vector<float> block(2 * T * D);  // one page of 5 slots: K then V, one kv head
  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  for (auto& v : block)
    v = dist(rng);
  std::vector<float> q(NH * D);
  for (auto& v : q)
    v = dist(rng);
  const void* pages[] = {block.data()};
  const cpu::PagedKv kv{pages, T, 1, D};
  const float slopes[] = {0.5f, 0.125f};
  std::vector<float> out(NH * D), scratch(T);
  cpu::paged_attention(q.data(), NH, kv, 0, T - 1, 0.5f, out.data(), scratch.data(),
                       cpu::KernelPath::kScalar, slopes);
  for (std::size_t h = 0; h < NH; ++h) {
    Vec s(T);
    double sum = 0;
    for (std::size_t j = 0; j < T; ++j) {
      double d = 0;
      for (std::size_t i = 0; i < D; ++i)
        d += q[h * D + i] * block[j * D + i];
      s[j] = std::exp(d * 0.5 + slopes[h] * static_cast<double>(j));
      sum += s[j];
    }
    for (std::size_t i = 0; i < D; ++i) {
      double want = 0;
      for (std::size_t j = 0; j < T; ++j)
        want += s[j] / sum * block[(T + j) * D + i];
      EXPECT_NEAR(out[h * D + i], want, 1e-5) << "head " << h;
    }
  }
}

TEST(ZooBlocks, EmbeddingScalesAndAddsOffsetPositions) {
  const std::vector<float> table{1, 2, 3, 4, 5, 6};          // 3 tokens x 2
  const std::vector<float> pos{0, 0, 0, 0, 10, 20, 30, 40};  // 4 rows x 2
  const cpu::EmbeddingTable tokens{DType::kF32, reinterpret_cast<const std::byte*>(table.data()), 3,
                                   2};
  const cpu::EmbeddingTable positions{DType::kF32, reinterpret_cast<const std::byte*>(pos.data()),
                                      4, 2};
  const std::int32_t ids[] = {2, 0}, at[] = {0, 1};
  std::vector<float> out(4);
  cpu::embed_tokens(tokens, ids, 2, 0.5f, &positions, at, 2, out.data());
  EXPECT_EQ(out, (std::vector<float>{2.5f + 10, 3 + 20, 0.5f + 30, 1 + 40}));
}

TEST(ZooBlocks, LongropeSwitchesFactorsPastTheOriginalContext) {
  model::RopeSpec r;
  r.scaling = model::RopeScaling::kLongrope;
  r.theta = 10000.0;
  r.factor = 4.0;
  r.original_max_position_embeddings = 8;
  r.short_factor = {1.0, 2.0};
  r.long_factor = {3.0, 5.0};
  const auto short_freqs = model::rope_frequencies(r, 4, 8);
  const auto long_freqs = model::rope_frequencies(r, 4, 9);
  EXPECT_FLOAT_EQ(short_freqs.inv_freq[1], 1.0f / (2.0f * 100.0f));
  EXPECT_FLOAT_EQ(long_freqs.inv_freq[0], 1.0f / 3.0f);
  EXPECT_FLOAT_EQ(long_freqs.inv_freq[1], 1.0f / (5.0f * 100.0f));
  EXPECT_FLOAT_EQ(long_freqs.attention_factor,
                  static_cast<float>(std::sqrt(1.0 + std::log(4.0) / std::log(8.0))));
}

// A Falcon config the spec does not cover fails at load time naming the field.
TEST(ZooBlocks, FalconVariantsTheSpecDoesNotCoverAreRefused) {
  const fs::path dir = fs::temp_directory_path() / "weft_zoo_falcon_alibi";
  fs::create_directories(dir);
  Dims d;
  std::string config = testing::zoo::config_json(Family::kFalconMqa, d);
  auto swap = [&](const std::string& from, const std::string& to) {
    config.replace(config.find(from), from.size(), to);
  };
  swap("\"alibi\":false", "\"alibi\":true");
  std::ofstream(dir / "config.json") << config;
  auto spec = read_model_spec(default_spec_dir() / "falcon.json", dir / "config.json");
  ASSERT_FALSE(spec.ok());
  const std::string what = spec.error().what();
  EXPECT_NE(what.find("\"alibi\" is true"), std::string::npos) << what;
  EXPECT_NE(what.find("supported: false"), std::string::npos) << what;

  config = testing::zoo::config_json(Family::kFalconMqa, d);
  swap("\"parallel_attn\":true", "\"parallel_attn\":false");
  std::ofstream(dir / "config.json") << config;
  spec = read_model_spec(default_spec_dir() / "falcon.json", dir / "config.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(std::string(spec.error().what()).find("tensors.mlp_norm"), std::string::npos)
      << spec.error().what();
}

// A config.json value the spec's blocks do not implement is refused ("requires").
TEST(ZooBlocks, BloomWithResidualFromTheNormIsRefused) {
  const fs::path dir = fs::temp_directory_path() / "weft_zoo_bloom_requires";
  fs::create_directories(dir);
  std::string config = testing::zoo::config_json(Family::kBloom, Dims{});
  config.insert(config.size() - 1, R"(,"apply_residual_connection_post_layernorm":true)");
  std::ofstream(dir / "config.json") << config;
  auto spec = read_model_spec(default_spec_dir() / "bloom.json", dir / "config.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.error().code(), ErrorCode::kUnsupported);
  const std::string what = spec.error().what();
  EXPECT_NE(what.find("\"apply_residual_connection_post_layernorm\" is true"), std::string::npos)
      << what;
  EXPECT_NE(what.find("supported: false"), std::string::npos) << what;
}

INSTANTIATE_TEST_SUITE_P(Families, ZooBlocks, ::testing::ValuesIn(testing::zoo::cases()),
                         [](const auto& param) { return std::string(param.param.name); });

}  // namespace
}  // namespace weft
