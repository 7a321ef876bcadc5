// mT5's spec file (config/models/mt5.json) against what transformers computes: MT5Config in
// transformers 5 forces tie_word_embeddings true (checkpoints it saves hold only shared.weight,
// the lm head tied to it) and MT5ForConditionalGeneration does not scale the decoder output
// before the lm head (T5's scale_decoder_outputs is not an mT5 field); transformers 4 scaled it
// only when tie_word_embeddings was true, which released mT5 checkpoints set false (an untied
// lm_head.weight). So: scale 1 unless a config says scale_decoder_outputs true, the head tied
// as tie_word_embeddings says. T5's own configs keep their d_model^-0.5 (t5.json).

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "loaders/model_loader.hpp"
#include "loaders/model_spec_file.hpp"

namespace weft {
namespace {

namespace fs = std::filesystem;

model::ModelSpec resolve(const std::string& name, const std::string& extra,
                         const std::string& architecture, const std::string& model_type,
                         const char* want_file) {
  const fs::path dir = fs::temp_directory_path() / ("weft_mt5_spec_" + name);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json")
      << R"({"architectures":[")" << architecture << R"("],"model_type":")" << model_type
      << R"(","vocab_size":256,"d_model":64,"d_kv":16,"d_ff":128,"num_layers":2,)"
      << R"("num_decoder_layers":2,"num_heads":4,"feed_forward_proj":"gated-gelu",)"
      << R"("decoder_start_token_id":0,"pad_token_id":0,"eos_token_id":1)" << extra << "}";
  auto file = find_spec_file(default_spec_dir(), dir / "config.json");
  EXPECT_TRUE(file) << file.error().what();
  if (!file) return {};
  EXPECT_EQ(file->filename(), want_file);
  auto spec = read_model_spec(*file, dir / "config.json");
  EXPECT_TRUE(spec) << spec.error().what();
  return spec ? *spec : model::ModelSpec{};
}

TEST(Mt5Spec, Transformers5ConfigIsTiedAndUnscaled) {
  const auto s = resolve("tf5", R"(,"tie_word_embeddings":true)", "MT5ForConditionalGeneration",
                         "mt5", "mt5.json");
  EXPECT_TRUE(s.tied_embeddings);
  EXPECT_DOUBLE_EQ(s.seq2seq.lm_head_scale, 1.0);
  EXPECT_TRUE(s.gated_mlp);
  EXPECT_EQ(s.activation, model::Activation::kGeluTanh);
  EXPECT_EQ(s.position, model::PositionEmbedding::kRelativeBuckets);
}

TEST(Mt5Spec, ReleasedCheckpointConfigIsUntiedAndUnscaled) {
  const auto s = resolve("released", R"(,"tie_word_embeddings":false)",
                         "MT5ForConditionalGeneration", "mt5", "mt5.json");
  EXPECT_FALSE(s.tied_embeddings);
  EXPECT_DOUBLE_EQ(s.seq2seq.lm_head_scale, 1.0);
}

TEST(Mt5Spec, ModelTypeAloneFindsItAndAnExplicitScaleIsRead) {
  const auto s = resolve("explicit", R"(,"tie_word_embeddings":true,"scale_decoder_outputs":true)",
                         "SomeHeadClass", "mt5", "mt5.json");
  EXPECT_DOUBLE_EQ(s.seq2seq.lm_head_scale, 0.125);  // d_model 64
}

TEST(Mt5Spec, T5KeepsItsScale) {
  const auto tied = resolve("t5_tied", R"(,"tie_word_embeddings":true)",
                            "T5ForConditionalGeneration", "t5", "t5.json");
  EXPECT_DOUBLE_EQ(tied.seq2seq.lm_head_scale, 0.125);
  const auto flan =
      resolve("t5_flan", R"(,"tie_word_embeddings":true,"scale_decoder_outputs":false)",
              "T5ForConditionalGeneration", "t5", "t5.json");
  EXPECT_DOUBLE_EQ(flan.seq2seq.lm_head_scale, 1.0);
}

}  // namespace
}  // namespace weft
