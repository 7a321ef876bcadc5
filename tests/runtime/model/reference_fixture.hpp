#pragma once
// Reads a fixture model's reference.json and reference.safetensors (tests/fixtures/README.md).

#include <simdjson.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "loaders/safetensors.hpp"

namespace weft::testing {

// The source tree: $WEFT_TEST_SOURCE_DIR when set (test binaries built on one machine and run
// from another checkout, as scripts/gpu-check does on the device machine), else the tree the
// test was built from.
inline std::filesystem::path source_dir() {
  if (const char* env = std::getenv("WEFT_TEST_SOURCE_DIR"); env != nullptr && *env != '\0') {
    return env;
  }
  return WEFT_SOURCE_DIR;
}

inline std::filesystem::path fixture_dir(const std::string& name) {
  return source_dir() / "tests" / "fixtures" / "models" / name;
}

inline const std::vector<std::string>& fixture_models() {
  static const std::vector<std::string> names{"llama_gqa_f32",
                                              "llama_mqa_tied_llama3_bf16",
                                              "llama_linear_headdim_bias_f16",
                                              "llama_dynamic_sharded_f32",
                                              "mistral_swa_bf16",
                                              "qwen2_tied_f32",
                                              "qwen2_yarn_bf16"};
  return names;
}

struct ReferencePrompt {
  std::vector<int> prompt_ids;
  std::vector<int> greedy_ids;
  std::vector<double> greedy_margins;
  std::vector<float> prefill;  // [prompt_len, vocab]
  std::vector<float> decode;   // [greedy_len - 1, vocab]
};

inline std::vector<float> f32_values(const SafetensorsFile& file, const std::string& name) {
  const TensorView* t = file.find(name);
  if (t == nullptr || t->dtype != DType::kF32) throw std::runtime_error("reference lacks " + name);
  const float* p = t->as<float>();
  return {p, p + t->numel()};
}

inline std::vector<ReferencePrompt> read_reference(const std::filesystem::path& dir) {
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.load((dir / "reference.json").string());
  auto logits = SafetensorsFile::open(dir / "reference.safetensors").value();
  std::vector<ReferencePrompt> out;
  std::size_t index = 0;
  for (auto p : root["prompts"].get_array()) {
    ReferencePrompt r;
    for (auto v : p["prompt_ids"].get_array())
      r.prompt_ids.push_back(static_cast<int>(v.get_int64()));
    for (auto v : p["greedy_ids"].get_array())
      r.greedy_ids.push_back(static_cast<int>(v.get_int64()));
    for (auto v : p["greedy_margins"].get_array())
      r.greedy_margins.push_back(v.get_double());
    const std::string prefix = "p" + std::to_string(index++);
    r.prefill = f32_values(*logits, prefix + ".prefill");
    r.decode = f32_values(*logits, prefix + ".decode");
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace weft::testing
