// GGUF models: weft-tiny converted to GGUF gives the safetensors folder's logits (F32, BF16)
// or close to them (Q8_0, Q4_0); the Hugging Face fixture models (untied head, q/k/v bias,
// explicit head_dim, linear rope) convert and load to the same logits, which checks that the
// Q/K rope permutation is undone; K-quant files of a random model stay within bounds of its
// F32 file; metadata and tensor problems are errors naming the key or tensor.
#include "loaders/gguf_model.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include "kernels/cpu/thread_pool.hpp"
#include "tests/loaders/gguf_test_models.hpp"

namespace weft::gguf::testing {

std::vector<float> prefill_logits(const model::Model& model,
                                  const std::vector<std::int32_t>& tokens) {
  cpu::ThreadPool pool(2);
  const int page_size = 16;
  const int len = static_cast<int>(tokens.size());
  model::KvCache kv(model.kv_layout(page_size), (len + page_size - 1) / page_size + 1);
  model::StepBatch step;
  step.tokens = tokens;
  for (int i = 0; i < len; ++i)
    step.positions.push_back(i);
  model::SequenceSlice seq{0, len, {}, true};
  while (static_cast<int>(seq.page_table.size()) < kv.pages_for(len))
    seq.page_table.push_back(kv.allocate_page().value());
  step.sequences.push_back(seq);
  std::vector<float> logits;
  auto ok = model.forward(step, kv, logits, pool);
  if (!ok) throw ok.error();
  return logits;
}

namespace {

const std::vector<std::int32_t> kTinyPrompt = {5, 312, 1022, 47, 2900, 11, 8000, 77, 123, 4096};

struct Comparison {
  double max_error = 0;  // max |a - b|
  double max_ref = 0;    // max |b|
  double relative_rms = 0;
  int argmax_mismatches = 0;
};

Comparison compare(const std::vector<float>& got, const std::vector<float>& want, int vocab) {
  Comparison c;
  double err = 0, ref = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    c.max_error = std::max(c.max_error, static_cast<double>(std::fabs(got[i] - want[i])));
    c.max_ref = std::max(c.max_ref, static_cast<double>(std::fabs(want[i])));
    err += (got[i] - want[i]) * (got[i] - want[i]);
    ref += want[i] * want[i];
  }
  c.relative_rms = std::sqrt(err / ref);
  for (std::size_t row = 0; row < got.size() / static_cast<std::size_t>(vocab); ++row) {
    const auto* g = got.data() + row * static_cast<std::size_t>(vocab);
    const auto* w = want.data() + row * static_cast<std::size_t>(vocab);
    if (std::max_element(g, g + vocab) - g != std::max_element(w, w + vocab) - w) {
      ++c.argmax_mismatches;
    }
  }
  return c;
}

LoadedModel load_or_throw(const std::filesystem::path& path, DType dequantize_to = DType::kBF16) {
  auto loaded = load_gguf_model(path, {}, {dequantize_to});
  if (!loaded) throw loaded.error();
  return std::move(loaded.value());
}

class TinyGguf : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto folder = load_model(source_path("models/weft-tiny"));
    ASSERT_TRUE(folder) << folder.error().what();
    reference_ = new std::vector<float>(prefill_logits(folder->model, kTinyPrompt));
  }
  static void TearDownTestSuite() {
    delete reference_;
    reference_ = nullptr;
  }
  static std::vector<float>* reference_;
};
std::vector<float>* TinyGguf::reference_ = nullptr;

TEST_F(TinyGguf, F32AndBf16FilesGiveTheFolderModelsLogits) {
  for (const char* type : {"f32", "bf16"}) {
    const auto path = converted("models/weft-tiny", type);
    // load_model takes a GGUF file where it takes a folder.
    auto loaded = load_model(path);
    ASSERT_TRUE(loaded) << loaded.error().what();
    EXPECT_EQ(loaded->model.spec().vocab_size, 8192);
    EXPECT_TRUE(loaded->model.spec().tied_embeddings);
    EXPECT_EQ(loaded->generation.eos_token_ids, std::vector<int>{0});
    const auto logits = prefill_logits(loaded->model, kTinyPrompt);
    const Comparison c = compare(logits, *reference_, 8192);
    EXPECT_LE(c.max_error, 1e-4 * c.max_ref) << type;
    EXPECT_EQ(c.argmax_mismatches, 0) << type;
  }
}

TEST_F(TinyGguf, QuantizedFilesStayCloseToTheFolderModel) {
  struct Case {
    const char* type;
    double max_relative_rms;
  };
  // Measured: Q8_0 0.0044, Q4_0 0.069, Q4_1 0.057, Q5_0 0.032, Q5_1 0.030, F16 2e-7.
  for (const Case c : {Case{"q8_0", 0.015}, Case{"q4_0", 0.15}, Case{"q4_1", 0.15},
                       Case{"q5_0", 0.08}, Case{"q5_1", 0.08}, Case{"f16", 1e-4}}) {
    const auto loaded = load_or_throw(converted("models/weft-tiny", c.type), DType::kF32);
    const Comparison cmp = compare(prefill_logits(loaded.model, kTinyPrompt), *reference_, 8192);
    EXPECT_LT(cmp.relative_rms, c.max_relative_rms) << c.type;
    EXPECT_GT(cmp.relative_rms, 0.0) << c.type << ": identical logits, was it quantized?";
    std::cout << c.type << ": logits' relative rms error " << cmp.relative_rms << '\n';
  }
}

// The transformers-checked fixture folders convert (Q/K permuted as llama.cpp does) and load
// back to the folder's logits: an unpermutation mistake would scramble attention.
TEST(GgufModel, HuggingFaceFixturesRoundTripThroughGguf) {
  for (const char* name : {"llama_gqa_f32", "llama_linear_headdim_bias_f16"}) {
    const std::string folder = std::string("tests/fixtures/models/") + name;
    auto want = load_model(source_path(folder));
    ASSERT_TRUE(want) << want.error().what();
    const auto got = load_or_throw(converted(folder, "f32"));
    const std::vector<std::int32_t> prompt = {3, 17, 200, 45, 9, 128, 77, 1, 250, 31, 64, 5, 99};
    const auto spec = got.model.spec();
    EXPECT_EQ(spec.head_dim, want->model.spec().head_dim) << name;
    EXPECT_EQ(spec.qkv_bias, want->model.spec().qkv_bias) << name;
    EXPECT_EQ(spec.tied_embeddings, want->model.spec().tied_embeddings) << name;
    EXPECT_EQ(spec.rope.scaling, want->model.spec().rope.scaling) << name;
    const Comparison c = compare(prefill_logits(got.model, prompt),
                                 prefill_logits(want->model, prompt), spec.vocab_size);
    EXPECT_LE(c.max_error, 1e-5 * c.max_ref) << name;
    EXPECT_EQ(c.argmax_mismatches, 0) << name;
  }
}

TEST(GgufModel, KQuantFilesStayCloseToTheirF32File) {
  const auto reference_path = write_synthetic("synthetic-f32", {});
  const auto reference = load_or_throw(reference_path);
  const std::vector<std::int32_t> prompt = {1, 2, 3, 50, 299, 7, 120, 8};
  const auto want = prefill_logits(reference.model, prompt);
  struct Case {
    TensorType type;
    double max_relative_rms;
  };
  // Random weights amplify the weights' error a few times over two layers (measured: Q8_0
  // 0.018, Q6_K 0.065, Q5_K 0.13, Q4_K 0.28); the bounds leave room, the order must hold.
  std::vector<double> errors;
  for (const Case c : {Case{TensorType::kQ8_0, 0.03}, Case{TensorType::kQ6_K, 0.1},
                       Case{TensorType::kQ5_K, 0.2}, Case{TensorType::kQ4_K, 0.4}}) {
    SyntheticOptions o;
    o.type = c.type;
    const auto path = write_synthetic("synthetic-" + std::string(tensor_type_name(c.type)), o);
    auto file = File::open(path);
    ASSERT_TRUE(file) << file.error().what();
    EXPECT_EQ((*file)->find_tensor("blk.1.ffn_down.weight")->type, c.type);
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const auto loaded = load_or_throw(path, dtype);
      EXPECT_EQ(loaded.model.layers()[0].down.dtype, dtype);
      const Comparison cmp = compare(prefill_logits(loaded.model, prompt), want, 300);
      EXPECT_LT(cmp.relative_rms, c.max_relative_rms)
          << tensor_type_name(c.type) << " as " << dtype_name(dtype);
      EXPECT_GT(cmp.relative_rms, 0.0) << tensor_type_name(c.type);
      if (dtype == DType::kF32) errors.push_back(cmp.relative_rms);
    }
  }
  ASSERT_EQ(errors.size(), 4u);
  EXPECT_TRUE(std::is_sorted(errors.begin(), errors.end()))
      << "more bits should mean less error: Q8_0 " << errors[0] << ", Q6_K " << errors[1]
      << ", Q5_K " << errors[2] << ", Q4_K " << errors[3];
}

TEST(GgufModel, MetadataAndTensorProblemsAreNamedErrors) {
  struct Case {
    const char* name;
    SyntheticOptions options;
    ErrorCode code;
    std::string message_has;
  };
  SyntheticOptions qwen;
  qwen.architecture = "qwen3";
  SyntheticOptions no_layers;
  no_layers.skip_keys = {"llama.block_count"};
  SyntheticOptions no_arch;
  no_arch.skip_keys = {"general.architecture"};
  SyntheticOptions no_down;
  no_down.skip_tensors = {"blk.1.ffn_down.weight"};
  SyntheticOptions rope_freqs;
  rope_freqs.rope_freqs = true;
  const std::vector<Case> cases = {
      {"qwen3", qwen, ErrorCode::kUnsupported, "architecture \"qwen3\" is not supported"},
      {"no-block-count", no_layers, ErrorCode::kNotFound, "\"llama.block_count\" is missing"},
      {"no-architecture", no_arch, ErrorCode::kNotFound, "\"general.architecture\" is missing"},
      {"no-down", no_down, ErrorCode::kNotFound, "\"blk.1.ffn_down.weight\""},
      {"rope-freqs", rope_freqs, ErrorCode::kUnsupported, "rope_freqs.weight"},
  };
  for (const Case& c : cases) {
    const auto path = write_synthetic(std::string("bad-") + c.name, c.options);
    auto loaded = load_model(path);
    ASSERT_FALSE(loaded) << c.name;
    EXPECT_EQ(loaded.error().code(), c.code) << c.name << ": " << loaded.error().what();
    const std::string message = loaded.error().what();
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
    EXPECT_NE(message.find(c.message_has), std::string::npos) << message;
  }
}

TEST(GgufModel, RecognisesGgufFilesAndRefusesOtherDequantizeTargets) {
  EXPECT_FALSE(is_gguf_file(source_path("models/weft-tiny")));
  EXPECT_FALSE(is_gguf_file(source_path("models/weft-tiny/config.json")));
  const auto path = write_synthetic("plain", {});
  EXPECT_TRUE(is_gguf_file(path));
  const auto renamed = temp_dir() / "plain.bin";
  std::filesystem::copy_file(path, renamed, std::filesystem::copy_options::overwrite_existing);
  EXPECT_TRUE(is_gguf_file(renamed));  // by its magic
  auto loaded = load_gguf_model(path, {}, {DType::kI8});
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().code(), ErrorCode::kInvalidArgument);
}

TEST(GgufModel, QAndKRowPermutationMatchesLlamaCpp) {
  // Head size 8: Hugging Face rows 0..3 (first half) go to even rows, 4..7 to odd rows.
  const std::vector<std::int64_t> want = {0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15};
  for (std::int64_t r = 0; r < 16; ++r)
    EXPECT_EQ(gguf_rope_row(r, 8), want[static_cast<std::size_t>(r)]) << r;
}

}  // namespace
}  // namespace weft::gguf::testing
