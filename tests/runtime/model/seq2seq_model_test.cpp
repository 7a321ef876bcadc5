// Encoder-decoder models (config/models/t5.json, m2m100.json) on tiny in-memory checkpoints:
// the spec files resolve, the CPU forward matches a double-precision reference written from
// transformers' semantics (seq2seq_reference.hpp), a cached step-by-step decode matches one
// teacher-forced pass, batched requests match requests run alone, and pages are accounted
// exactly.

#include "runtime/model/seq2seq_model.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "loaders/model_loader.hpp"
#include "loaders/model_spec_file.hpp"
#include "loaders/safetensors_writer.hpp"
#include "runtime/model/seq2seq_session.hpp"
#include "tests/runtime/model/seq2seq_reference.hpp"

namespace weft::testing::seq2seq {
namespace {

namespace fs = std::filesystem;

struct Built {
  Config config;
  model::ModelSpec spec;
  std::shared_ptr<Weights> weights;
  std::optional<model::Seq2SeqModel> model;
};

const char* name_of(Kind k) {
  return k == Kind::kT5Relu ? "t5_relu" : k == Kind::kT5Gated ? "t5_gated" : "m2m100";
}

fs::path write_config(const std::string& name, const std::string& json) {
  const fs::path dir = fs::temp_directory_path() / ("weft_seq2seq_" + name);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << json;
  return dir;
}

Built build(Kind kind) {
  Built b{config_of(kind), {}, nullptr, std::nullopt};
  const fs::path dir = write_config(name_of(kind), config_json(b.config));
  auto file = find_spec_file(default_spec_dir(), dir / "config.json");
  if (!file) throw file.error();
  EXPECT_EQ(file->filename(), b.config.t5() ? "t5.json" : "m2m100.json");
  auto spec = read_model_spec(*file, dir / "config.json");
  if (!spec) throw spec.error();
  b.spec = *spec;
  b.weights = std::make_shared<Weights>(make_weights(b.config));
  auto w = b.weights;
  model::WeightLookup lookup{[w](const std::string& name) -> const TensorView* {
                               auto it = w->map.find(name);
                               return it == w->map.end() ? nullptr : &it->second;
                             },
                             [](const std::string&) { return std::string("memory"); }, "memory"};
  auto m = model::Seq2SeqModel::create(b.spec, lookup);
  if (!m) throw m.error();
  b.model.emplace(std::move(m.value()));
  return b;
}

double rel_error(const std::vector<float>& got, std::size_t offset, const Vec& want) {
  double err = 0, scale = 1e-3;
  for (std::size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::fabs(got[offset + i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return err / scale;
}

class Seq2SeqFamilies : public ::testing::TestWithParam<Kind> {};

TEST_P(Seq2SeqFamilies, SpecResolvesTheFamilysBlocks) {
  const Built b = build(GetParam());
  const auto& s = b.spec;
  const auto& c = b.config;
  EXPECT_EQ(s.network, model::Network::kEncoderDecoder);
  EXPECT_EQ(s.num_layers, c.dec_layers);
  EXPECT_EQ(s.num_heads, c.dec_heads);
  EXPECT_EQ(s.head_dim, c.dec_hd);
  EXPECT_EQ(s.intermediate_size, c.dec_ffn);
  EXPECT_EQ(s.seq2seq.encoder_layers, c.enc_layers);
  EXPECT_EQ(s.seq2seq.encoder_heads, c.enc_heads);
  EXPECT_EQ(s.seq2seq.encoder_head_dim, c.enc_hd);
  EXPECT_EQ(s.seq2seq.encoder_intermediate_size, c.enc_ffn);
  EXPECT_EQ(s.tied_embeddings, c.tied);
  if (c.t5()) {
    EXPECT_EQ(s.position, model::PositionEmbedding::kRelativeBuckets);
    EXPECT_EQ(s.norm, model::Norm::kRms);
    EXPECT_EQ(s.seq2seq.relative_buckets, c.buckets);
    EXPECT_EQ(s.seq2seq.relative_max_distance, c.max_distance);
    EXPECT_DOUBLE_EQ(s.seq2seq.attention_scale, 1.0);
    EXPECT_DOUBLE_EQ(s.seq2seq.lm_head_scale, c.tied ? 0.25 : 1.0);  // d_model 16
    EXPECT_EQ(s.gated_mlp, GetParam() == Kind::kT5Gated);
    EXPECT_EQ(s.activation, GetParam() == Kind::kT5Gated ? model::Activation::kGeluTanh
                                                         : model::Activation::kRelu);
    EXPECT_EQ(s.seq2seq.decoder_start_token_id, 0);
  } else {
    EXPECT_EQ(s.position, model::PositionEmbedding::kSinusoidal);
    EXPECT_EQ(s.norm, model::Norm::kLayer);
    EXPECT_DOUBLE_EQ(s.embedding_scale, 4.0);  // sqrt(d_model 16)
    EXPECT_EQ(s.seq2seq.position_padding_idx, 1);
    EXPECT_EQ(s.seq2seq.decoder_start_token_id, 2);
    EXPECT_TRUE(s.qkv_bias);
  }
}

TEST_P(Seq2SeqFamilies, EncoderAndDecoderMatchTheReference) {
  const Built b = build(GetParam());
  const auto& c = b.config;
  const std::vector<int> src{5,  9, 3,  12, 7, 30, 21, 8,  17, 4, 26,
                             11, 6, 33, 19, 2, 14, 28, 10, 39, 2};
  const std::vector<int> dec{b.model->decoder_start_token_id(), 7, 22, 5, 13, 31, 9};
  const Reference ref(c, *b.weights);
  const auto enc_want = ref.encode(src);
  const auto logits_want = ref.decode(enc_want, dec);

  for (const int page_size : {1, 4, 16}) {
    SCOPED_TRACE(::testing::Message() << name_of(GetParam()) << " page size " << page_size);
    model::KvCache kv(b.model->kv_layout(page_size), 64);
    cpu::ThreadPool pool(2);
    model::CrossAttentionSlice cross;
    cross.length = static_cast<int>(src.size());
    for (int p = 0; p < kv.pages_for(cross.length); ++p)
      cross.page_table.push_back(*kv.allocate_page());
    model::EncodeBatch batch;
    batch.tokens.assign(src.begin(), src.end());
    batch.lengths = {static_cast<int>(src.size())};
    std::vector<float> hidden;
    ASSERT_TRUE(b.model->encode(batch, {cross}, kv, pool, cpu::KernelPath::kAuto, &hidden));
    for (std::size_t t = 0; t < src.size(); ++t) {
      EXPECT_LT(rel_error(hidden, t * static_cast<std::size_t>(c.hidden), enc_want[t]), 2e-4)
          << "encoder token " << t;
    }
    // Step by step with the cache.
    model::SequenceSlice seq{0, 1, {}, false};
    for (int p = 0; p < kv.pages_for(static_cast<int>(dec.size())); ++p)
      seq.page_table.push_back(*kv.allocate_page());
    std::vector<float> logits;
    for (std::size_t i = 0; i < dec.size(); ++i) {
      model::StepBatch step;
      step.tokens = {dec[i]};
      step.positions = {static_cast<int>(i)};
      step.sequences = {seq};
      ASSERT_TRUE(b.model->decode(step, {cross}, kv, logits, pool));
      EXPECT_LT(rel_error(logits, 0, logits_want[i]), 2e-4) << "decoder step " << i;
    }
    // One teacher-forced pass over the whole prefix rewrites the same pages and gives every
    // position's logits.
    model::StepBatch all;
    all.tokens.assign(dec.begin(), dec.end());
    for (std::size_t i = 0; i < dec.size(); ++i)
      all.positions.push_back(static_cast<int>(i));
    seq.token_count = static_cast<int>(dec.size());
    seq.all_logits = true;
    all.sequences = {seq};
    ASSERT_TRUE(b.model->decode(all, {cross}, kv, logits, pool));
    ASSERT_EQ(logits.size(), dec.size() * static_cast<std::size_t>(c.vocab));
    for (std::size_t i = 0; i < dec.size(); ++i) {
      EXPECT_LT(rel_error(logits, i * static_cast<std::size_t>(c.vocab), logits_want[i]), 2e-4)
          << "teacher-forced position " << i;
    }
  }
}

TEST_P(Seq2SeqFamilies, BatchedRequestsMatchRequestsAlone) {
  const Built b = build(GetParam());
  const std::vector<std::vector<std::int32_t>> sources{
      {5, 9, 3, 12, 7, 30, 21, 8, 2}, {17, 4, 26, 2}, {11, 6, 33, 19, 2, 14, 28, 10, 39, 3, 2}};
  const std::vector<std::vector<std::int32_t>> continuations{
      {7, 22, 5, 13}, {9, 9, 30, 4}, {21, 3, 18, 6}};
  const auto vocab = static_cast<std::size_t>(b.spec.vocab_size);
  // Alone.
  std::vector<std::vector<std::vector<float>>> alone(sources.size());
  for (std::size_t r = 0; r < sources.size(); ++r) {
    model::Seq2SeqSession session(*b.model, 4, 32, 1);
    auto ids = session.start({sources[r]}, 5);
    ASSERT_TRUE(ids);
    std::int32_t token = b.model->decoder_start_token_id();
    std::vector<float> logits;
    for (std::size_t i = 0; i <= continuations[r].size(); ++i) {
      ASSERT_TRUE(session.step({ids->front()}, {token}, logits));
      alone[r].push_back(logits);
      if (i < continuations[r].size()) token = continuations[r][i];
    }
  }
  // Together: one encoder pass, decoder steps for all three (the third joins a step late).
  model::Seq2SeqSession session(*b.model, 4, 64, 2);
  auto first = session.start({sources[0], sources[1]}, 5);
  ASSERT_TRUE(first);
  std::vector<float> logits;
  const auto start = b.model->decoder_start_token_id();
  ASSERT_TRUE(session.step(*first, {start, start}, logits));
  for (std::size_t r = 0; r < 2; ++r) {
    for (std::size_t v = 0; v < vocab; ++v)
      ASSERT_NEAR(logits[r * vocab + v], alone[r][0][v], 1e-4);
  }
  auto third = session.start({sources[2]}, 5);
  ASSERT_TRUE(third);
  const std::vector<int> ids{(*first)[0], (*first)[1], third->front()};
  for (std::size_t i = 0; i < continuations[0].size(); ++i) {
    const std::vector<std::int32_t> tokens{continuations[0][i], continuations[1][i],
                                           i == 0 ? start : continuations[2][i - 1]};
    ASSERT_TRUE(session.step(ids, tokens, logits));
    const std::size_t steps[] = {i + 1, i + 1, i};
    for (std::size_t r = 0; r < 3; ++r) {
      for (std::size_t v = 0; v < vocab; ++v) {
        ASSERT_NEAR(logits[r * vocab + v], alone[r][steps[r]][v], 1e-4)
            << "request " << r << " step " << steps[r];
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, Seq2SeqFamilies,
                         ::testing::Values(Kind::kT5Relu, Kind::kT5Gated, Kind::kM2M100),
                         [](const auto& info) { return std::string(name_of(info.param)); });

TEST(Seq2SeqSession, PagesAreExactAndFreedWithTheRequest) {
  const Built b = build(Kind::kT5Relu);
  model::Seq2SeqSession session(*b.model, 4, 10, 1);
  // 9 source tokens: 3 pages; 8 decoder positions: 2 pages.
  auto ids = session.start({{5, 9, 3, 12, 7, 30, 21, 8, 2}}, 8);
  ASSERT_TRUE(ids);
  EXPECT_EQ(session.free_pages(), 5);
  // Another such request needs 5 pages: fits exactly; a third does not, and nothing leaks.
  auto second = session.start({{5, 9, 3, 12, 7, 30, 21, 8, 2}}, 8);
  ASSERT_TRUE(second);
  EXPECT_EQ(session.free_pages(), 0);
  auto refused = session.start({{4, 2}}, 1);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(std::string(refused.error().what()).find("0 are free"), std::string::npos);
  session.finish(ids->front());
  EXPECT_EQ(session.free_pages(), 5);
  session.finish(second->front());
  EXPECT_EQ(session.free_pages(), 10);
  session.finish(12345);  // unknown: ignored
  EXPECT_EQ(session.free_pages(), 10);
}

TEST(Seq2SeqSession, BadStepsAreClearErrors) {
  const Built b = build(Kind::kM2M100);
  model::Seq2SeqSession session(*b.model, 4, 16, 1);
  auto ids = session.start({{5, 9, 2}}, 2);
  ASSERT_TRUE(ids);
  std::vector<float> logits;
  auto unknown = session.step({99}, {2}, logits);
  ASSERT_FALSE(unknown);
  EXPECT_NE(std::string(unknown.error().what()).find("no live request with id 99"),
            std::string::npos);
  auto outside = session.step(*ids, {40}, logits);
  ASSERT_FALSE(outside);
  EXPECT_NE(std::string(outside.error().what()).find("outside the vocabulary"), std::string::npos);
  ASSERT_TRUE(session.step(*ids, {2}, logits));
  ASSERT_TRUE(session.step(*ids, {7}, logits));
  auto full = session.step(*ids, {7}, logits);
  ASSERT_FALSE(full);
  EXPECT_NE(std::string(full.error().what()).find("used its 2 decoder positions"),
            std::string::npos);
  auto empty = session.start({{}}, 2);
  ASSERT_FALSE(empty);
  auto bad_token = session.start({{5, 400}}, 2);
  ASSERT_FALSE(bad_token);
  EXPECT_NE(std::string(bad_token.error().what()).find("token id 400"), std::string::npos);
  EXPECT_EQ(session.free_pages(), 16 - 2);  // the refused starts gave their pages back
}

TEST(Seq2SeqModel, MissingTensorIsNamed) {
  Built b = build(Kind::kT5Gated);
  b.weights->map.erase("decoder.block.2.layer.1.EncDecAttention.k.weight");
  auto w = b.weights;
  model::WeightLookup lookup{[w](const std::string& name) -> const TensorView* {
                               auto it = w->map.find(name);
                               return it == w->map.end() ? nullptr : &it->second;
                             },
                             [](const std::string&) { return std::string("memory"); }, "memory"};
  auto m = model::Seq2SeqModel::create(b.spec, lookup);
  ASSERT_FALSE(m);
  const std::string what = m.error().what();
  EXPECT_NE(what.find("decoder.block.2.layer.1.EncDecAttention.k.weight"), std::string::npos);
  EXPECT_NE(what.find("decoder layer 2 cross-attention k"), std::string::npos);
}

TEST(Seq2SeqSpec, UnknownFeedForwardProjIsAnErrorNamingTheField) {
  Config c = config_of(Kind::kT5Relu);
  std::string json = config_json(c);
  json.replace(json.find("\"relu\""), 6, "\"gated-swish\"");
  const fs::path dir = write_config("bad_ffp", json);
  auto spec = read_model_spec(default_spec_dir() / "t5.json", dir / "config.json");
  ASSERT_FALSE(spec);
  const std::string what = spec.error().what();
  EXPECT_NE(what.find("feed_forward_proj"), std::string::npos) << what;
  EXPECT_NE(what.find("gated-swish"), std::string::npos) << what;
}

// The checkpoint written as a folder (model.safetensors + config.json) loads through
// load_model, finding the spec by config.json, and gives the reference's logits.
TEST(Seq2SeqLoader, FolderLoadsAndMatchesTheReference) {
  for (const Kind kind : {Kind::kT5Gated, Kind::kM2M100}) {
    const Config c = config_of(kind);
    const Weights w = make_weights(c);
    const fs::path dir = write_config(std::string("folder_") + name_of(kind), config_json(c));
    std::vector<SafetensorsEntry> entries;
    std::vector<const TensorView*> views;
    for (const auto& [name, view] : w.map) {
      entries.push_back({name, DType::kF32, view.shape});
      views.push_back(&view);
    }
    ASSERT_TRUE(write_safetensors(dir / "model.safetensors", entries, {},
                                  [&](std::size_t i) -> Result<TensorView> { return *views[i]; }));
    LoadOptions options;
    options.allow_seq2seq = true;
    auto loaded = load_model(dir, options);
    ASSERT_TRUE(loaded) << loaded.error().what();
    ASSERT_TRUE(loaded->seq2seq);
    EXPECT_EQ(loaded->spec_file.filename(), kind == Kind::kM2M100 ? "m2m100.json" : "t5.json");
    const std::vector<int> src{5, 9, 3, 12, 7, 30, 21, 2};
    const std::vector<int> dec{loaded->seq2seq->decoder_start_token_id(), 7, 22};
    const Reference ref(c, w);
    const auto want = ref.decode(ref.encode(src), dec);
    model::Seq2SeqSession session(*loaded->seq2seq, 4, 16, 1);
    auto ids = session.start({std::vector<std::int32_t>(src.begin(), src.end())}, 3);
    ASSERT_TRUE(ids);
    std::vector<float> logits;
    for (std::size_t i = 0; i < dec.size(); ++i) {
      ASSERT_TRUE(session.step(*ids, {dec[i]}, logits));
      EXPECT_LT(rel_error(logits, 0, want[i]), 2e-4) << name_of(kind) << " step " << i;
    }
  }
}

TEST(Seq2SeqSpec, ZeroHeadsAreAnErrorNotADivision) {
  // M2M100's spec derives the encoder's head_dim from its heads: 0 heads must be refused.
  std::string json = config_json(config_of(Kind::kM2M100));
  json.replace(json.find("\"encoder_attention_heads\":4"), 27, "\"encoder_attention_heads\":0");
  const fs::path dir = write_config("zero_heads", json);
  auto spec = read_model_spec(default_spec_dir() / "m2m100.json", dir / "config.json");
  ASSERT_FALSE(spec);
  EXPECT_NE(std::string(spec.error().what()).find("encoder_heads"), std::string::npos)
      << spec.error().what();
}

TEST(Seq2SeqLoader, RefusedWhereTheCallerCannotRunIt) {
  // A folder whose config is T5's: without allow_seq2seq the loader says what runs it (before
  // it needs any weights file).
  const fs::path dir = write_config("refused", config_json(config_of(Kind::kT5Relu)));
  std::ofstream(dir / "model.safetensors", std::ios::binary)
      << std::string("\x08\x00\x00\x00\x00\x00\x00\x00{}      ", 16);
  auto loaded = load_model(dir);
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().code(), ErrorCode::kUnsupported);
  EXPECT_NE(std::string(loaded.error().what()).find("encoder-decoder"), std::string::npos)
      << loaded.error().what();
}

}  // namespace
}  // namespace weft::testing::seq2seq
