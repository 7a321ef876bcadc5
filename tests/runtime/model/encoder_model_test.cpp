// EncoderModel on the committed random-weight BERT (tests/fixtures/bert/random_tiny, made by
// make_random_bert.py): attention in both directions, packed batches equal to sequences run
// alone, pooling, the spec's encoder section, and the errors for bad weights and bad input.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "kernels/cpu/thread_pool.hpp"
#include "loaders/model_loader.hpp"
#include "loaders/model_spec_encoder.hpp"
#include "loaders/model_spec_file.hpp"
#include "tests/runtime/model/reference_fixture.hpp"

namespace weft {
namespace {

namespace fs = std::filesystem;

fs::path random_tiny() {
  return testing::source_dir() / "tests" / "fixtures" / "bert" / "random_tiny";
}

void expect_mentions(const std::string& message, std::initializer_list<std::string> parts) {
  for (const auto& p : parts)
    EXPECT_NE(message.find(p), std::string::npos) << message << " lacks " << p;
}

struct Tiny {
  model::ModelSpec spec;
  std::shared_ptr<WeightFiles> files;
  std::map<std::string, TensorView> replaced;
  std::set<std::string> removed;

  model::WeightLookup lookup() const {
    return {[this](const std::string& name) -> const TensorView* {
              if (removed.count(name)) return nullptr;
              if (auto it = replaced.find(name); it != replaced.end()) return &it->second;
              return files->find(name);
            },
            [](const std::string&) { return std::string("tiny.safetensors"); }, "random_tiny"};
  }
};

Tiny open_tiny() {
  auto spec = read_model_spec(default_spec_dir() / "bert.json", random_tiny() / "config.json");
  if (!spec) throw spec.error();
  auto files = WeightFiles::open_folder(random_tiny());
  if (!files) throw files.error();
  return {spec.value(), std::make_shared<WeightFiles>(std::move(files.value())), {}, {}};
}

model::EncoderModel load_tiny() {
  LoadOptions options;
  options.allow_encoder = true;
  auto loaded = load_model(random_tiny(), options);
  if (!loaded) throw loaded.error();
  return std::move(*loaded->encoder);
}

std::vector<float> encode(const model::EncoderModel& m, const model::EncodeBatch& batch) {
  cpu::ThreadPool pool(2);
  std::vector<float> hidden;
  auto ok = m.encode(batch, hidden, pool);
  if (!ok) throw ok.error();
  return hidden;
}

TEST(EncoderSpec, BertSpecResolves) {
  auto t = open_tiny();
  EXPECT_EQ(t.spec.network, model::Network::kEncoderOnly);
  EXPECT_EQ(t.spec.position, model::PositionEmbedding::kLearned);
  EXPECT_EQ(t.spec.encoder.max_position_embeddings, 40);
  EXPECT_EQ(t.spec.encoder.position_offset, 0);
  EXPECT_EQ(t.spec.encoder.type_vocab_size, 2);
  EXPECT_EQ(t.spec.head_dim, 8);
  EXPECT_EQ(t.spec.activation, model::Activation::kGelu);
  EXPECT_DOUBLE_EQ(t.spec.norm_epsilon, 1e-12);
  EXPECT_EQ(t.spec.encoder.tensor_prefixes, (std::vector<std::string>{"", "bert."}));
}

TEST(EncoderSpec, RobertaOffsetIsPaddingIdxPlusOne) {
  const fs::path dir = fs::temp_directory_path() / "weft_roberta_spec";
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"architectures": ["XLMRobertaModel"],
      "vocab_size": 100, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
      "num_attention_heads": 4, "max_position_embeddings": 514, "pad_token_id": 1,
      "type_vocab_size": 1})";
  auto found = find_spec_file(default_spec_dir(), dir / "config.json");
  ASSERT_TRUE(found.ok()) << found.error().what();
  EXPECT_EQ(found->filename(), "roberta.json");
  auto spec = read_model_spec(*found, dir / "config.json");
  ASSERT_TRUE(spec.ok()) << spec.error().what();
  EXPECT_EQ(spec->encoder.position_offset, 2);
  EXPECT_EQ(spec->encoder.type_vocab_size, 1);
  EXPECT_DOUBLE_EQ(spec->norm_epsilon, 1e-5);
  fs::remove_all(dir);
}

TEST(EncoderSpec, MissingEncoderSectionIsNamed) {
  const fs::path dir = fs::temp_directory_path() / "weft_encoder_spec_bad";
  fs::create_directories(dir);
  std::ifstream in(default_spec_dir() / "bert.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.replace(text.find("\"encoder\""), 9, "\"not_encoder\"");
  std::ofstream(dir / "spec.json") << text;
  auto spec = read_model_spec(dir / "spec.json", random_tiny() / "config.json");
  ASSERT_FALSE(spec.ok());
  expect_mentions(spec.error().what(), {"spec.json", "\"encoder\"", "encoder_only"});
  fs::remove_all(dir);
}

TEST(EncoderSpec, SentenceTransformersPooling) {
  const fs::path dir = fs::temp_directory_path() / "weft_st_pooling";
  fs::create_directories(dir / "1_Pooling");
  model::EncoderSpec e;
  std::ofstream(dir / "1_Pooling" / "config.json")
      << R"({"word_embedding_dimension": 32, "pooling_mode_cls_token": true,
             "pooling_mode_mean_tokens": false})";
  std::ofstream(dir / "modules.json")
      << R"([{"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"},
             {"idx": 2, "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])";
  ASSERT_TRUE(read_sentence_transformers_pooling(dir, e).ok());
  EXPECT_EQ(e.pooling, model::Pooling::kCls);
  EXPECT_TRUE(e.normalize);
  std::ofstream(dir / "1_Pooling" / "config.json") << R"({"pooling_mode_max_tokens": true})";
  auto bad = read_sentence_transformers_pooling(dir, e);
  ASSERT_FALSE(bad.ok());
  expect_mentions(bad.error().what(), {"1_Pooling", "max"});
  fs::remove_all(dir);
}

TEST(EncoderModel, GeneratorsRefuseEncoderModels) {
  auto loaded = load_model(random_tiny());
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.error().code(), ErrorCode::kUnsupported);
  expect_mentions(loaded.error().what(), {"BertModel", "encoder-only", "weft embed"});
}

TEST(EncoderModel, AttentionSeesLaterTokens) {
  const auto m = load_tiny();
  const int H = m.spec().hidden_size;
  auto a = encode(m, {{2, 60, 61, 3}, {}, {4}});
  auto b = encode(m, {{2, 60, 62, 3}, {}, {4}});
  // A causal model's first token could not see the third; an encoder's does.
  double diff = 0;
  for (int j = 0; j < H; ++j)
    diff += std::abs(a[j] - b[j]);
  EXPECT_GT(diff, 1e-3);
}

TEST(EncoderModel, PackedBatchEqualsSequencesAlone) {
  const auto m = load_tiny();
  const std::vector<std::int32_t> s1{2, 50, 51, 52, 3}, s2{2, 70, 3}, s3{2, 80, 81, 82, 83, 84, 3};
  model::EncodeBatch packed;
  for (const auto* s : {&s1, &s2, &s3}) {
    packed.tokens.insert(packed.tokens.end(), s->begin(), s->end());
    packed.lengths.push_back(static_cast<int>(s->size()));
  }
  auto together = encode(m, packed);
  std::vector<float> alone;
  for (const auto* s : {&s1, &s2, &s3}) {
    auto h = encode(m, {*s, {}, {static_cast<int>(s->size())}});
    alone.insert(alone.end(), h.begin(), h.end());
  }
  ASSERT_EQ(together.size(), alone.size());
  for (std::size_t i = 0; i < alone.size(); ++i)
    ASSERT_NEAR(together[i], alone[i], 1e-5) << i;
}

TEST(EncoderModel, TokenTypesChangeTheResult) {
  const auto m = load_tiny();
  auto zero = encode(m, {{2, 50, 3}, {0, 0, 0}, {3}});
  auto implicit = encode(m, {{2, 50, 3}, {}, {3}});
  auto one = encode(m, {{2, 50, 3}, {1, 1, 1}, {3}});
  EXPECT_EQ(zero, implicit);
  EXPECT_NE(zero, one);
}

TEST(EncoderModel, Pooling) {
  const auto m = load_tiny();
  const int H = m.spec().hidden_size;
  model::EncodeBatch batch{{2, 50, 51, 3, 2, 60, 3}, {}, {4, 3}};
  auto hidden = encode(m, batch);
  cpu::ThreadPool pool(2);
  auto mean = m.embed(batch, model::Pooling::kMean, false, pool);
  auto cls = m.embed(batch, model::Pooling::kCls, false, pool);
  auto unit = m.embed(batch, model::Pooling::kMean, true, pool);
  ASSERT_TRUE(mean.ok() && cls.ok() && unit.ok());
  ASSERT_EQ(mean->size(), 2u);
  for (int j = 0; j < H; ++j) {
    float sum = 0;
    for (int t = 0; t < 4; ++t)
      sum += hidden[t * H + j];
    EXPECT_NEAR((*mean)[0][j], sum / 4, 1e-5);
    EXPECT_FLOAT_EQ((*cls)[1][j], hidden[4 * H + j]);
  }
  double norm = 0;
  for (float f : (*unit)[1])
    norm += f * f;
  EXPECT_NEAR(norm, 1.0, 1e-5);
}

TEST(EncoderModel, BadInputIsAnErrorNamingTheSequence) {
  const auto m = load_tiny();
  cpu::ThreadPool pool(1);
  std::vector<float> hidden;
  const int vocab = m.spec().vocab_size;
  auto expect_error = [&](model::EncodeBatch b, std::initializer_list<std::string> parts) {
    auto r = m.encode(b, hidden, pool);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
    expect_mentions(r.error().what(), parts);
  };
  expect_error({{2, vocab, 3}, {}, {3}}, {"sequence 0", "token id " + std::to_string(vocab)});
  expect_error({{2, 3, 2, 3}, {0, 0, 0, 2}, {2, 2}}, {"sequence 1", "token type 2"});
  expect_error({std::vector<std::int32_t>(41, 5), {}, {41}}, {"41 tokens", "40 positions"});
  expect_error({{2, 3}, {}, {2, 0}}, {"sequence 1", "empty"});
  expect_error({{2, 3, 4}, {}, {2}}, {"cover 2 of 3"});
}

TEST(EncoderModel, WeightErrorsNameTheTensor) {
  {
    auto t = open_tiny();
    t.removed.insert("encoder.layer.1.output.dense.weight");
    auto m = model::EncoderModel::create(t.spec, t.lookup());
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.error().code(), ErrorCode::kNotFound);
    expect_mentions(m.error().what(), {"encoder.layer.1.output.dense.weight", "mlp down"});
  }
  {
    auto t = open_tiny();
    t.replaced["embeddings.position_embeddings.weight"] =
        make_f32_tensor({10, 32}, std::vector<float>(320));
    auto m = model::EncoderModel::create(t.spec, t.lookup());
    ASSERT_FALSE(m.ok());
    expect_mentions(m.error().what(), {"position_embeddings", "[10, 32]", "expects [40, 32]"});
  }
  {
    auto t = open_tiny();
    t.removed.insert("embeddings.word_embeddings.weight");
    auto m = model::EncoderModel::create(t.spec, t.lookup());
    ASSERT_FALSE(m.ok());
    expect_mentions(m.error().what(), {"\"embeddings.word_embeddings.weight\"",
                                       "\"bert.embeddings.word_embeddings.weight\""});
  }
}

TEST(EncoderModel, PrefixedCheckpoint) {
  // BertForMaskedLM keeps the encoder under "bert.": the same weights under that prefix give
  // the same states.
  auto t = open_tiny();
  std::map<std::string, TensorView> prefixed;
  for (const auto& name : t.files->names())
    prefixed["bert." + name] = *t.files->find(name);
  model::WeightLookup lookup{[&](const std::string& n) -> const TensorView* {
                               auto it = prefixed.find(n);
                               return it == prefixed.end() ? nullptr : &it->second;
                             },
                             [](const std::string&) { return std::string("prefixed"); },
                             "prefixed"};
  auto m = model::EncoderModel::create(t.spec, lookup);
  ASSERT_TRUE(m.ok()) << m.error().what();
  EXPECT_EQ(m->tensor_prefix(), "bert.");
  const model::EncodeBatch batch{{2, 50, 51, 3}, {}, {4}};
  EXPECT_EQ(encode(*m, batch), encode(load_tiny(), batch));
}

}  // namespace
}  // namespace weft
