// Quantized weights in a model (docs/quantization.md): weft-tiny quantized at load and written
// as a quantized folder give the same logits, stay close to the bf16 model, and bad input
// (unknown format in config.json, a wrong block tensor shape, a quantized folder asked for
// another format, a non-empty --out) is an error that says what was wrong.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "loaders/model_loader.hpp"
#include "loaders/quantized_folder.hpp"
#include "loaders/safetensors.hpp"
#include "loaders/safetensors_writer.hpp"

namespace weft {
namespace {

namespace fs = std::filesystem;
const fs::path kTiny = fs::path(WEFT_SOURCE_DIR) / "models/weft-tiny";

fs::path fresh_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("weft_quant_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

std::vector<float> logits_of(const model::Model& m) {
  cpu::ThreadPool pool(2);
  model::KvCache kv(m.kv_layout(16), 4);
  std::vector<float> logits;
  const model::StepBatch step{
      {5, 17, 200, 3, 9, 44, 1000, 77}, {0, 1, 2, 3, 4, 5, 6, 7}, {{0, 8, {0}, true}}};
  auto ok = m.forward(step, kv, logits, pool);
  EXPECT_TRUE(ok) << ok.error().what();
  return logits;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(SafetensorsWriter, WritesWhatTheReaderReads) {
  const fs::path dir = fresh_dir("writer");
  fs::create_directories(dir);
  const std::vector<float> a{1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  const std::vector<std::uint8_t> b{1, 2, 3, 4, 5};
  const std::vector<SafetensorsEntry> entries{{"a.weight", DType::kF32, {2, 3}},
                                              {"b \"odd\" name", DType::kU8, {5}}};
  auto ok = write_safetensors(dir / "x.safetensors", entries, {{"format", "pt"}},
                              [&](std::size_t i) -> Result<TensorView> {
                                TensorView v;
                                v.dtype = entries[i].dtype;
                                v.shape = entries[i].shape;
                                v.data = i == 0 ? reinterpret_cast<const std::byte*>(a.data())
                                                : reinterpret_cast<const std::byte*>(b.data());
                                return v;
                              });
  ASSERT_TRUE(ok) << ok.error().what();
  auto file = SafetensorsFile::open(dir / "x.safetensors");
  ASSERT_TRUE(file) << file.error().what();
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  const TensorView* ta = (*file)->find("a.weight");
  const TensorView* tb = (*file)->find("b \"odd\" name");
  ASSERT_TRUE(ta && tb);
  EXPECT_EQ(ta->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(std::vector<float>(ta->as<float>(), ta->as<float>() + 6), a);
  EXPECT_EQ(std::vector<std::uint8_t>(tb->as<std::uint8_t>(), tb->as<std::uint8_t>() + 5), b);
  // A tensor whose data does not have the announced size stops the write; no file is left.
  auto bad = write_safetensors(
      dir / "y.safetensors", entries, {},
      [&](std::size_t) -> Result<TensorView> { return make_f32_tensor({1}, {1.0f}); });
  EXPECT_FALSE(bad);
  EXPECT_FALSE(fs::exists(dir / "y.safetensors"));
  fs::remove_all(dir);
}

TEST(QuantizedModel, OnTheFlyStaysCloseToTheFloatModelAndFewerBitsErrMore) {
  auto plain = load_model(kTiny);
  ASSERT_TRUE(plain) << plain.error().what();
  const auto reference = logits_of(plain->model);
  double previous = 0;
  for (const auto type :
       {quant::QuantType::kQ8B32, quant::QuantType::kQ4B32, quant::QuantType::kQ2B32}) {
    LoadOptions options;
    options.quantize = type;
    auto q = load_model(kTiny, options);
    ASSERT_TRUE(q) << q.error().what();
    EXPECT_EQ(q->model.weight_quantization(), type);
    EXPECT_TRUE(q->model.layers()[0].q.quantized());
    EXPECT_FALSE(q->model.lm_head().quantized());  // tied to the (unquantized) embedding
    const auto logits = logits_of(q->model);
    ASSERT_EQ(logits.size(), reference.size());
    double err = 0, norm = 0;
    for (std::size_t i = 0; i < logits.size(); ++i) {
      err += (logits[i] - reference[i]) * (logits[i] - reference[i]);
      norm += reference[i] * reference[i];
    }
    const double relative = std::sqrt(err / norm);
    if (type == quant::QuantType::kQ8B32) EXPECT_LT(relative, 0.01);
    if (type == quant::QuantType::kQ4B32) EXPECT_LT(relative, 0.15);
    EXPECT_GT(relative, previous) << quant::quant_info(type).name;
    previous = relative;
  }
}

TEST(QuantizedModel, WrittenFolderLoadsDirectlyWithTheSameLogitsAsOnTheFly) {
  const fs::path out = fresh_dir("folder");
  auto plain = load_model(kTiny);
  ASSERT_TRUE(plain) << plain.error().what();
  cpu::ThreadPool pool(2);
  std::size_t last_done = 0, last_total = 0;
  auto stats = write_quantized_folder(kTiny, *plain, quant::QuantType::kQ3HB64, out, &pool,
                                      [&](std::size_t done, std::size_t total) {
                                        EXPECT_GE(done, last_done);
                                        last_done = done;
                                        last_total = total;
                                      });
  ASSERT_TRUE(stats) << stats.error().what();
  EXPECT_EQ(last_done, last_total);
  EXPECT_EQ(stats->quantized_tensors, 8u * 7u);  // q, k, v, o, gate, up, down per layer
  EXPECT_LT(stats->written_bytes, stats->source_bytes * 6 / 10);
  EXPECT_TRUE(fs::exists(out / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(out / "generation_config.json"));
  EXPECT_FALSE(fs::exists(out / "README.md"));
  EXPECT_FALSE(fs::exists(out / "eval.json"));  // the bf16 model's figures
  EXPECT_NE(read_text(out / "config.json").find("\"format\": \"q3h_b64\""), std::string::npos);

  auto file = SafetensorsFile::open(out / "model.safetensors");
  ASSERT_TRUE(file) << file.error().what();
  const TensorView* q = (*file)->find("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dtype, DType::kU8);
  EXPECT_EQ(q->shape, (std::vector<std::int64_t>{384, 384 / 64 * 32}));

  auto loaded = load_model(out);
  ASSERT_TRUE(loaded) << loaded.error().what();
  EXPECT_EQ(loaded->model.weight_quantization(), quant::QuantType::kQ3HB64);
  LoadOptions options;
  options.quantize = quant::QuantType::kQ3HB64;
  auto on_the_fly = load_model(kTiny, options);
  ASSERT_TRUE(on_the_fly) << on_the_fly.error().what();
  EXPECT_EQ(logits_of(loaded->model), logits_of(on_the_fly->model));

  // Asking a quantized folder for its own format is fine; another one is an error.
  EXPECT_TRUE(load_model(out, options));
  options.quantize = quant::QuantType::kQ8B32;
  auto other = load_model(out, options);
  ASSERT_FALSE(other);
  EXPECT_NE(std::string(other.error().what()).find("already quantized (q3h_b64)"),
            std::string::npos)
      << other.error().what();
  // Writing over a non-empty folder is refused.
  auto again = write_quantized_folder(kTiny, *plain, quant::QuantType::kQ4B32, out, &pool, {});
  ASSERT_FALSE(again);
  EXPECT_NE(std::string(again.error().what()).find("not an empty folder"), std::string::npos);
  fs::remove_all(out);
}

TEST(QuantizedModel, BadQuantizationEntriesAreErrorsNamingTheProblem) {
  const fs::path out = fresh_dir("bad");
  auto plain = load_model(kTiny);
  ASSERT_TRUE(plain) << plain.error().what();
  cpu::ThreadPool pool(2);
  ASSERT_TRUE(write_quantized_folder(kTiny, *plain, quant::QuantType::kQ4B32, out, &pool, {}));
  const std::string config = read_text(out / "config.json");
  auto rewrite = [&](const std::string& from, const std::string& to) {
    std::string text = config;
    text.replace(text.find(from), from.size(), to);
    std::ofstream(out / "config.json", std::ios::binary | std::ios::trunc) << text;
  };
  rewrite("\"format\": \"q4_b32\"", "\"format\": \"q4_k\"");
  auto unknown = load_model(out);
  ASSERT_FALSE(unknown);
  const std::string message = unknown.error().what();
  EXPECT_NE(message.find("config.json"), std::string::npos) << message;
  EXPECT_NE(message.find("\"q4_k\""), std::string::npos) << message;
  EXPECT_NE(message.find("q3h_b64"), std::string::npos) << message;  // the supported list

  // The block tensors are q4_b32 rows; read as q4_b64 their shape is wrong.
  rewrite("\"format\": \"q4_b32\"", "\"format\": \"q4_b64\"");
  auto wrong_shape = load_model(out);
  ASSERT_FALSE(wrong_shape);
  const std::string shape_message = wrong_shape.error().what();
  EXPECT_NE(shape_message.find("quantized tensor \"model.layers.0."), std::string::npos)
      << shape_message;
  EXPECT_NE(shape_message.find("q4_b64"), std::string::npos) << shape_message;

  // Without the entry the U8 tensors are refused, with a hint.
  std::string text = config;
  text.replace(text.find("\"quantization\""), 14, "\"not_quantization\"");
  std::ofstream(out / "config.json", std::ios::binary | std::ios::trunc) << text;
  auto missing = load_model(out);
  ASSERT_FALSE(missing);
  EXPECT_NE(std::string(missing.error().what()).find("\"quantization\" entry"), std::string::npos)
      << missing.error().what();
  fs::remove_all(out);
}

// --quantize with tensor parallelism: each rank quantizes its own shard after the split (its
// column-parallel q has half the rows; row-parallel o half the columns, whole blocks of 32);
// a folder stored quantized is refused for tensor parallelism, saying what to do instead.
TEST(QuantizedModel, TensorParallelRanksQuantizeTheirShardsAndStoredFoldersAreRefused) {
  for (int rank = 0; rank < 2; ++rank) {
    LoadOptions options;
    options.quantize = quant::QuantType::kQ4B32;
    options.tensor_parallel_size = 2;
    options.tensor_parallel_rank = rank;
    auto r = load_model(kTiny, options);
    ASSERT_TRUE(r) << r.error().what();
    EXPECT_EQ(r->model.weight_quantization(), quant::QuantType::kQ4B32);
    const auto& layer = r->model.layers()[0];
    ASSERT_TRUE(layer.q.quantized());
    ASSERT_TRUE(layer.o.quantized());
    EXPECT_EQ(layer.q.rows, 384u / 2);
    EXPECT_EQ(layer.q.cols, 384u);
    EXPECT_EQ(layer.o.rows, 384u);
    EXPECT_EQ(layer.o.cols, 384u / 2);
  }
  const fs::path out = fresh_dir("tp");
  auto plain = load_model(kTiny);
  ASSERT_TRUE(plain) << plain.error().what();
  cpu::ThreadPool pool(2);
  ASSERT_TRUE(write_quantized_folder(kTiny, *plain, quant::QuantType::kQ8B32, out, &pool, {}));
  LoadOptions options;
  options.tensor_parallel_size = 2;
  auto r = load_model(out, options);
  ASSERT_FALSE(r);
  EXPECT_NE(std::string(r.error().what()).find("stored quantized (q8_b32)"), std::string::npos)
      << r.error().what();
  EXPECT_NE(std::string(r.error().what()).find("--quantize"), std::string::npos)
      << r.error().what();
  fs::remove_all(out);
}

// A pipeline stage (alone, or in a tensor-parallel group) quantizes only the matrices it binds:
// its layers (its shard of them) and the head, which every stage binds. The bytes it quantizes
// (the progress callback's total) say so: each stage less than the whole model, both stages
// together the whole model plus the head once more; a rank of TP=2 x PP=2 about half its
// stage's.
TEST(QuantizedModel, PipelineStagesQuantizeOnlyTheirLayers) {
  auto total_of = [](int tp, int pp, int stage) -> std::size_t {
    LoadOptions options;
    options.quantize = quant::QuantType::kQ4B32;
    options.tensor_parallel_size = tp;
    options.pipeline_parallel_size = pp;
    options.pipeline_stage = stage;
    std::size_t total = 0, done = 0;
    options.on_quantize_progress = [&](std::size_t d, std::size_t t) {
      done = d;
      total = t;
    };
    auto r = load_model(kTiny, options);
    EXPECT_TRUE(r) << r.error().what();
    if (!r) return 0;
    EXPECT_EQ(done, total);
    EXPECT_EQ(r->model.weight_quantization(), quant::QuantType::kQ4B32);
    const auto& first = r->model.layers()[static_cast<std::size_t>(r->model.first_layer())];
    EXPECT_TRUE(first.q.quantized());
    EXPECT_TRUE(first.down.quantized());
    return total;
  };
  const std::size_t whole = total_of(1, 1, 0);
  const std::size_t stage0 = total_of(1, 2, 0), stage1 = total_of(1, 2, 1);
  ASSERT_GT(whole, 0u);
  EXPECT_LT(stage0, whole);
  EXPECT_LT(stage1, whole);
  auto plain = load_model(kTiny);
  ASSERT_TRUE(plain) << plain.error().what();
  const auto& spec = plain->model.spec();
  const std::size_t head =
      spec.tied_embeddings ? 0 : plain->weights->find(spec.tensors.lm_head)->nbytes();
  EXPECT_EQ(stage0 + stage1, whole + head);
  const std::size_t rank_stage0 = total_of(2, 2, 0);
  EXPECT_LT(rank_stage0, stage0);
  EXPECT_GE(rank_stage0, stage0 / 2);
}

}  // namespace
}  // namespace weft
