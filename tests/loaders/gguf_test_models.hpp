#pragma once
// Helpers for the GGUF model and tokenizer tests: GGUF files written into a temporary folder
// (from a model folder with the test converter, or a random Llama-shaped model whose rows are
// whole K-quant super-blocks), and the logits of one prefill.

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "loaders/model_loader.hpp"
#include "tests/fixtures/gguf/hf_to_gguf.hpp"

namespace weft::gguf::testing {

// A folder of this test process, removed when the process's tests end.
inline std::filesystem::path temp_dir() {
  struct Folder {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("weft_gguf_test_" + std::to_string(::getpid()));
    Folder() { std::filesystem::create_directories(path); }
    ~Folder() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Folder folder;
  return folder.path;
}

inline std::filesystem::path source_path(const std::string& relative) {
  return std::filesystem::path(WEFT_SOURCE_DIR) / relative;
}

// The GGUF of a model folder (relative to the source tree) in `type`, written once per run.
inline std::filesystem::path converted(const std::string& folder, const std::string& type) {
  const auto path =
      temp_dir() / (std::filesystem::path(folder).filename().string() + "-" + type + ".gguf");
  if (!std::filesystem::exists(path)) {
    convert_hf_folder(source_path(folder), parse_tensor_type(type)).write(path);
  }
  return path;
}

struct SyntheticOptions {
  TensorType type = TensorType::kF32;
  std::string architecture = "llama";
  std::set<std::string> skip_keys;
  std::set<std::string> skip_tensors;
  bool rope_freqs = false;
};

// A random Llama: hidden 256, 4 heads of 64, 2 kv heads, ffn 512, 2 layers, vocab 300, untied.
// The same seed gives the same float weights for every type.
inline Writer synthetic_llama(const SyntheticOptions& o) {
  constexpr int kHidden = 256, kFfn = 512, kLayers = 2, kVocab = 300, kHeads = 4, kKv = 2,
                kHeadDim = 64;
  Writer w;
  auto u32 = [&](const std::string& key, std::uint32_t v) {
    if (!o.skip_keys.count(key)) w.add_u32(key, v);
  };
  if (!o.skip_keys.count("general.architecture"))
    w.add_string("general.architecture", o.architecture);
  const std::string p = o.architecture + ".";
  u32(p + "context_length", 512);
  u32(p + "embedding_length", kHidden);
  u32(p + "block_count", kLayers);
  u32(p + "feed_forward_length", kFfn);
  u32(p + "attention.head_count", kHeads);
  u32(p + "attention.head_count_kv", kKv);
  w.add_f32(p + "attention.layer_norm_rms_epsilon", 1e-5f);
  w.add_f32(p + "rope.freq_base", 10000.0f);
  std::mt19937 rng(99);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto add = [&](const std::string& name, std::vector<std::int64_t> shape, bool matrix) {
    std::size_t n = 1;
    for (auto d : shape)
      n *= static_cast<std::size_t>(d);
    std::vector<float> v(n);
    const float scale = matrix ? 1.0f / std::sqrt(static_cast<float>(shape.back())) : 0.2f;
    for (float& x : v)
      x = normal(rng) * scale + (matrix ? 0.0f : 1.0f);
    if (!o.skip_tensors.count(name))
      w.add_tensor(name, shape, matrix ? o.type : TensorType::kF32, v);
  };
  add("token_embd.weight", {kVocab, kHidden}, true);
  add("output_norm.weight", {kHidden}, false);
  add("output.weight", {kVocab, kHidden}, true);
  for (int l = 0; l < kLayers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(b + "attn_norm.weight", {kHidden}, false);
    add(b + "ffn_norm.weight", {kHidden}, false);
    add(b + "attn_q.weight", {kHeads * kHeadDim, kHidden}, true);
    add(b + "attn_k.weight", {kKv * kHeadDim, kHidden}, true);
    add(b + "attn_v.weight", {kKv * kHeadDim, kHidden}, true);
    add(b + "attn_output.weight", {kHidden, kHeads * kHeadDim}, true);
    add(b + "ffn_gate.weight", {kFfn, kHidden}, true);
    add(b + "ffn_up.weight", {kFfn, kHidden}, true);
    add(b + "ffn_down.weight", {kHidden, kFfn}, true);
  }
  if (o.rope_freqs) add("rope_freqs.weight", {kHeadDim / 2}, false);
  return w;
}

inline std::filesystem::path write_synthetic(const std::string& name, const SyntheticOptions& o) {
  const auto path = temp_dir() / (name + ".gguf");
  synthetic_llama(o).write(path);
  return path;
}

// Logits of every position of one prefill of `tokens`.
std::vector<float> prefill_logits(const model::Model& model,
                                  const std::vector<std::int32_t>& tokens);

}  // namespace weft::gguf::testing
