// Spec files + config.json -> ModelSpec, spec selection by architecture, generation_config,
// and the errors for unknown architectures and mistyped config fields.

#include "loaders/model_spec_file.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "loaders/model_loader.hpp"

namespace weft {
namespace {

namespace fs = std::filesystem;
using model::RopeScaling;

const fs::path kModels = fs::path(WEFT_SOURCE_DIR) / "tests/fixtures/models";
const fs::path kSpecs = fs::path(WEFT_SOURCE_DIR) / "config/models";

model::ModelSpec spec_for(const std::string& name) {
  const auto config = kModels / name / "config.json";
  auto file = find_spec_file(kSpecs, config);
  if (!file) throw file.error();
  auto spec = read_model_spec(*file, config);
  if (!spec) throw spec.error();
  return spec.value();
}

fs::path scratch_config(const std::string& name, const std::string& json) {
  auto dir = fs::temp_directory_path() / ("weft_spec_test_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << json;
  return dir / "config.json";
}

void expect_mentions(const std::string& message, std::initializer_list<std::string> parts) {
  for (const auto& p : parts)
    EXPECT_NE(message.find(p), std::string::npos) << message << " lacks " << p;
}

TEST(ModelSpecFile, KnowsTheShippedArchitectures) {
  const auto known = known_architectures(kSpecs);
  EXPECT_TRUE(std::is_sorted(known.begin(), known.end()));
  for (const char* arch :
       {"BloomForCausalLM", "FalconForCausalLM", "GPT2LMHeadModel", "GemmaForCausalLM",
        "LlamaForCausalLM", "MistralForCausalLM", "OPTForCausalLM", "Phi3ForCausalLM",
        "Qwen2ForCausalLM", "BertModel", "BertForMaskedLM", "RobertaModel", "XLMRobertaModel",
        "T5ForConditionalGeneration", "M2M100ForConditionalGeneration"}) {
    EXPECT_NE(std::find(known.begin(), known.end(), arch), known.end()) << arch;
  }
}

TEST(ModelSpecFile, LlamaWithLlama3RopeAndTiedMqa) {
  const auto s = spec_for("llama_mqa_tied_llama3_bf16");
  EXPECT_EQ(s.architecture, "LlamaForCausalLM");
  EXPECT_EQ(s.num_layers, 3);
  EXPECT_EQ(s.num_heads, 4);
  EXPECT_EQ(s.num_kv_heads, 1);
  EXPECT_EQ(s.head_dim, 16);  // hidden_size / num_heads
  EXPECT_TRUE(s.tied_embeddings);
  EXPECT_EQ(s.rope.scaling, RopeScaling::kLlama3);
  EXPECT_DOUBLE_EQ(s.rope.factor, 8.0);
  EXPECT_EQ(s.rope.original_max_position_embeddings, 64);
  EXPECT_DOUBLE_EQ(s.rope.high_freq_factor, 4.0);
  EXPECT_EQ(s.tensors.q, "model.layers.{layer}.self_attn.q_proj.weight");
}

TEST(ModelSpecFile, ExplicitHeadDimBiasAndLinearRope) {
  const auto s = spec_for("llama_linear_headdim_bias_f16");
  EXPECT_EQ(s.head_dim, 32);
  EXPECT_EQ(s.q_dim(), 128);
  EXPECT_TRUE(s.qkv_bias);
  EXPECT_TRUE(s.output_bias);
  EXPECT_EQ(s.rope.scaling, RopeScaling::kLinear);
  EXPECT_DOUBLE_EQ(s.rope.factor, 2.0);
}

TEST(ModelSpecFile, SlidingWindowOnlyWhereTheConfigEnablesIt) {
  EXPECT_EQ(spec_for("mistral_swa_bf16").sliding_window, 4);
  const auto qwen = spec_for("qwen2_tied_f32");
  EXPECT_EQ(qwen.sliding_window, 0);  // use_sliding_window is false
  EXPECT_TRUE(qwen.qkv_bias);
  EXPECT_FALSE(qwen.output_bias);
  EXPECT_DOUBLE_EQ(qwen.norm_epsilon, 1e-6);
  const auto yarn = spec_for("qwen2_yarn_bf16");
  EXPECT_EQ(yarn.rope.scaling, RopeScaling::kYarn);
  EXPECT_DOUBLE_EQ(yarn.rope.theta, 1000.0);
  EXPECT_EQ(spec_for("llama_dynamic_sharded_f32").rope.scaling, RopeScaling::kDynamic);
}

TEST(ModelSpecFile, Qwen2SlidingWindowFromMaxWindowLayers) {
  const auto config = scratch_config("qwen_swa", R"({"architectures":["Qwen2ForCausalLM"],
    "vocab_size":10,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":4,
    "num_attention_heads":2,"use_sliding_window":true,"sliding_window":32,"max_window_layers":2})");
  auto s = read_model_spec(kSpecs / "qwen2.json", config);
  ASSERT_TRUE(s.ok()) << s.error().what();
  EXPECT_EQ(s->sliding_window, 32);
  EXPECT_FALSE(s->layer_uses_window(1));  // transformers: layers >= max_window_layers slide
  EXPECT_TRUE(s->layer_uses_window(2));
}

TEST(ModelSpecFile, TransformersFourStyleRopeFields) {
  const auto config = scratch_config("v4", R"({"architectures":["LlamaForCausalLM"],
    "vocab_size":10,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,
    "num_attention_heads":2,"rope_theta":500000.0,
    "rope_scaling":{"type":"dynamic","factor":2.0},"max_position_embeddings":128})");
  auto s = read_model_spec(kSpecs / "llama.json", config);
  ASSERT_TRUE(s.ok()) << s.error().what();
  EXPECT_EQ(s->num_kv_heads, 2);  // defaults to num_heads
  EXPECT_DOUBLE_EQ(s->rope.theta, 500000.0);
  EXPECT_EQ(s->rope.scaling, RopeScaling::kDynamic);
  EXPECT_EQ(s->rope.max_position_embeddings, 128);
}

TEST(ModelSpecFile, UnknownArchitectureListsTheKnownOnesAndHowToAddOne) {
  const auto config =
      scratch_config("unknown", R"({"architectures":["MambaForCausalLM"],"model_type":"mamba"})");
  auto file = find_spec_file(kSpecs, config);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.error().code(), ErrorCode::kUnsupported);
  expect_mentions(file.error().what(),
                  {"MambaForCausalLM", "\"model_type\" is \"mamba\"", "\"architectures\"",
                   "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "GPT2LMHeadModel",
                   "gpt2, llama", "docs/model-spec.md", "--spec FILE", "config.json"});
}

// An index read once answers as reading the folder each time does, for every fixture model
// and for an unknown architecture.
TEST(ModelSpecFile, ASpecIndexReadOnceFindsTheSameFiles) {
  const SpecIndex specs = read_spec_index(kSpecs);
  EXPECT_FALSE(specs.architectures.empty());
  EXPECT_FALSE(specs.model_types.empty());
  int found = 0;
  for (const auto& entry : fs::directory_iterator(kModels)) {
    const auto config = entry.path() / "config.json";
    if (!fs::exists(config)) continue;
    auto once = find_spec_file(specs, config);
    auto each = find_spec_file(kSpecs, config);
    ASSERT_EQ(once.ok(), each.ok()) << config;
    if (once.ok()) {
      EXPECT_EQ(*once, *each) << config;
      ++found;
    } else {
      EXPECT_STREQ(once.error().what(), each.error().what());
    }
  }
  EXPECT_GT(found, 5);
  const auto unknown = scratch_config(
      "unknown_index", R"({"architectures":["MambaForCausalLM"],"model_type":"mamba"})");
  auto once = find_spec_file(specs, unknown);
  auto each = find_spec_file(kSpecs, unknown);
  ASSERT_FALSE(once.ok());
  ASSERT_FALSE(each.ok());
  EXPECT_STREQ(once.error().what(), each.error().what());
}

TEST(ModelSpecFile, ConfigFieldOfTheWrongType) {
  const std::string base = R"("architectures":["LlamaForCausalLM"],"vocab_size":10,
    "intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2)";
  auto config = scratch_config("wrong_type", "{" + base + R"(,"hidden_size":"8"})");
  auto s = read_model_spec(kSpecs / "llama.json", config);
  ASSERT_FALSE(s.ok());
  expect_mentions(s.error().what(),
                  {"config.json", "\"hidden_size\"", "a string", "expected an integer"});

  config = scratch_config(
      "wrong_type_rope",
      "{" + base + R"(,"hidden_size":8,"rope_scaling":{"rope_type":"linear","factor":"2"}})");
  s = read_model_spec(kSpecs / "llama.json", config);
  ASSERT_FALSE(s.ok());
  expect_mentions(s.error().what(),
                  {"config.json", "rope_scaling", "\"factor\"", "expected a number"});

  config = scratch_config("wrong_type_bool",
                          "{" + base + R"(,"hidden_size":8,"tie_word_embeddings":1})");
  s = read_model_spec(kSpecs / "llama.json", config);
  ASSERT_FALSE(s.ok());
  expect_mentions(s.error().what(), {"\"tie_word_embeddings\"", "expected a boolean"});

  config = scratch_config("missing", R"({"architectures":["LlamaForCausalLM"],"vocab_size":10})");
  s = read_model_spec(kSpecs / "llama.json", config);
  ASSERT_FALSE(s.ok());
  expect_mentions(s.error().what(), {"hidden_size", "config.json lacks"});

  config = scratch_config("heads", "{" + base + R"(,"hidden_size":8,"num_key_value_heads":3})");
  s = read_model_spec(kSpecs / "llama.json", config);
  ASSERT_FALSE(s.ok());
  expect_mentions(s.error().what(), {"num_heads (2) must be a multiple of num_kv_heads (3)"});

  config = scratch_config(
      "rope_type",
      "{" + base + R"(,"hidden_size":8,"rope_scaling":{"rope_type":"mystery","factor":2}})");
  s = read_model_spec(kSpecs / "llama.json", config);
  ASSERT_FALSE(s.ok());
  expect_mentions(s.error().what(), {"mystery", "yarn", "longrope"});

  // longrope without its factor lists names the missing key.
  config = scratch_config(
      "longrope_lists",
      "{" + base + R"(,"hidden_size":8,"rope_scaling":{"rope_type":"longrope","factor":2}})");
  s = read_model_spec(kSpecs / "llama.json", config);
  ASSERT_FALSE(s.ok());
  expect_mentions(s.error().what(), {"longrope", "\"short_factor\"", "list of numbers"});

  // A whole double beyond int64's range is not an integer (converting it was undefined
  // behaviour; found by fuzz_config_json under UBSan).
  config = scratch_config("huge", "{" + base + R"(,"hidden_size":1e28})");
  s = read_model_spec(kSpecs / "llama.json", config);
  ASSERT_FALSE(s.ok());
  expect_mentions(s.error().what(), {"\"hidden_size\"", "expected an integer"});

  config = scratch_config("not_json", "{\"architectures\": [");
  s = read_model_spec(kSpecs / "llama.json", config);
  ASSERT_FALSE(s.ok());
  expect_mentions(s.error().what(), {"config.json", "not valid JSON"});
}

TEST(ModelSpecFile, GenerationDefaults) {
  auto gen = read_generation_defaults(kModels / "llama_mqa_tied_llama3_bf16");
  ASSERT_TRUE(gen.ok()) << gen.error().what();
  EXPECT_EQ(gen->eos_token_ids, (std::vector<int>{2, 3}));
  EXPECT_EQ(gen->bos_token_id, 1);
  // generation_config.json without eos: config.json's is used.
  auto fallback = scratch_config("gen_fallback", R"({"eos_token_id":7,"bos_token_id":5})");
  std::ofstream(fallback.parent_path() / "generation_config.json") << R"({"bos_token_id":6})";
  gen = read_generation_defaults(fallback.parent_path());
  ASSERT_TRUE(gen.ok()) << gen.error().what();
  EXPECT_EQ(gen->eos_token_ids, (std::vector<int>{7}));
  EXPECT_EQ(gen->bos_token_id, 6);
  const auto config = scratch_config("gen", R"({"eos_token_id":"</s>"})");
  gen = read_generation_defaults(config.parent_path());
  ASSERT_FALSE(gen.ok());
  expect_mentions(gen.error().what(), {"config.json", "\"eos_token_id\"", "a string"});
}

TEST(ModelLoader, MissingFolderAndMissingConfig) {
  auto loaded = load_model("/nonexistent/weft/model");
  ASSERT_FALSE(loaded.ok());
  expect_mentions(loaded.error().what(), {"/nonexistent/weft/model"});
  const auto dir = fs::temp_directory_path() / "weft_spec_test_empty_model";
  fs::remove_all(dir);
  fs::create_directories(dir);
  loaded = load_model(dir);
  ASSERT_FALSE(loaded.ok());
  expect_mentions(loaded.error().what(), {"config.json", "missing"});
}

}  // namespace
}  // namespace weft
