// Engine::embed on the committed random-weight BERT (tests/fixtures/bert/random_tiny): inputs
// of concurrent requests batched together give the vectors they give alone, the model's
// pooling defaults and overrides, and the errors.

#include <gtest/gtest.h>

#include <boost/asio/use_future.hpp>
#include <cmath>
#include <future>

#include "weft/engine.hpp"
#include "weft/runtime.hpp"

namespace weft {
namespace {

namespace asio = boost::asio;

EngineConfig bert_config() {
  EngineConfig c;
  c.model_dir = std::string(WEFT_SOURCE_DIR) + "/tests/fixtures/bert/random_tiny";
  c.cpu_threads = 2;
  c.max_tokens_per_step = 24;  // small, so concurrent requests need several steps
  return c;
}

EmbedRequest texts(std::vector<std::string> inputs) {
  EmbedRequest r;
  r.texts = std::move(inputs);
  return r;
}

std::string error_of(std::future<EmbedResult>& f) {
  try {
    f.get();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

class EmbeddingEngineTest : public ::testing::Test {
 protected:
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
};

TEST_F(EmbeddingEngineTest, ConcurrentRequestsMatchRequestsAlone) {
  Engine engine(runtime.executor(), bert_config());
  ASSERT_TRUE(engine.embeds());
  EXPECT_EQ(engine.embedding_size(), 32);
  const std::vector<std::string> inputs = {
      "hello world", "The quick brown fox jumps over the lazy dog.", "x",
      "searching documents and sentence vectors", "caf\u00e9 na\u00efve \u4e2d\u6587"};
  std::vector<std::vector<float>> alone;
  int tokens = 0;
  for (const auto& text : inputs) {
    auto r = engine.embed(texts({text}), asio::use_future).get();
    ASSERT_EQ(r.embeddings.size(), 1u);
    ASSERT_EQ(r.embeddings[0].size(), 32u);
    alone.push_back(r.embeddings[0]);
    tokens += r.prompt_tokens;
  }
  const auto before = engine.metrics(asio::use_future).get();
  // All inputs in one request, and each again in its own request, all submitted at once.
  auto all = engine.embed(texts(inputs), asio::use_future);
  std::vector<std::future<EmbedResult>> each;
  for (const auto& text : inputs)
    each.push_back(engine.embed(texts({text}), asio::use_future));
  auto together = all.get();
  EXPECT_EQ(together.prompt_tokens, tokens);
  ASSERT_EQ(together.embeddings.size(), inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    auto single = each[i].get();
    for (std::size_t j = 0; j < 32; ++j) {
      EXPECT_NEAR(together.embeddings[i][j], alone[i][j], 1e-5) << i;
      EXPECT_NEAR(single.embeddings[0][j], alone[i][j], 1e-5) << i;
    }
  }
  const auto after = engine.metrics(asio::use_future).get();
  // 2 * tokens in at most 24-token steps; batching means far fewer steps than 10 inputs.
  EXPECT_LT(after.steps - before.steps, 2 * inputs.size());
  EXPECT_EQ(after.prompt_tokens - before.prompt_tokens, static_cast<std::uint64_t>(2 * tokens));
}

TEST_F(EmbeddingEngineTest, PoolingAndNormalize) {
  Engine engine(runtime.executor(), bert_config());
  EmbedRequest mean = texts({"hello world"});
  EmbedRequest cls = mean, unit = mean, ids;
  cls.pooling = EmbeddingPooling::kCls;
  unit.normalize = true;
  auto m = engine.embed(mean, asio::use_future).get().embeddings[0];
  auto c = engine.embed(cls, asio::use_future).get().embeddings[0];
  auto u = engine.embed(unit, asio::use_future).get().embeddings[0];
  EXPECT_NE(m, c);
  double norm_m = 0, norm_u = 0;
  for (std::size_t j = 0; j < m.size(); ++j) {
    norm_m += m[j] * m[j];
    norm_u += u[j] * u[j];
  }
  EXPECT_NEAR(norm_u, 1.0, 1e-5);
  for (std::size_t j = 0; j < m.size(); ++j)
    EXPECT_NEAR(u[j], m[j] / std::sqrt(norm_m), 1e-5);
  // Token ids give what their text gives: [CLS] hello world [SEP] in bert_files.py's vocabulary.
  ids.token_ids = {{2, 100, 101, 3}};
  auto by_ids = engine.embed(ids, asio::use_future).get();
  EXPECT_EQ(by_ids.prompt_tokens, 4);
  EXPECT_EQ(by_ids.embeddings[0], m);
}

TEST_F(EmbeddingEngineTest, Errors) {
  Engine engine(runtime.executor(), bert_config());
  EmbedRequest none;
  auto f = engine.embed(none, asio::use_future);
  EXPECT_NE(error_of(f).find("no inputs"), std::string::npos);
  EmbedRequest both = texts({"a"});
  both.token_ids = {{2, 3}};
  f = engine.embed(both, asio::use_future);
  EXPECT_NE(error_of(f).find("not both"), std::string::npos);
  EmbedRequest bad_id;
  bad_id.token_ids = {{2, 3}, {2, 100000, 3}};
  f = engine.embed(bad_id, asio::use_future);
  EXPECT_NE(error_of(f).find("input[1]: token id 100000"), std::string::npos);
  EmbedRequest empty;
  empty.token_ids = {{2, 3}, {}};
  f = engine.embed(empty, asio::use_future);
  EXPECT_NE(error_of(f).find("input[1]: empty"), std::string::npos);
  std::string long_text;
  for (int i = 0; i < 50; ++i)
    long_text += "fox ";
  f = engine.embed(texts({"ok", long_text}), asio::use_future);
  EXPECT_NE(error_of(f).find("input[1]: 52 tokens exceed the model's 40 positions"),
            std::string::npos);
  // An encoder does not generate.
  GenerateRequest g;
  g.prompt = "hello";
  try {
    engine.submit(g, asio::use_future).get();
    ADD_FAILURE() << "submit on an encoder succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("encoder-only"), std::string::npos);
  }
  engine.shutdown(asio::use_future).get();
  f = engine.embed(texts({"late"}), asio::use_future);
  EXPECT_NE(error_of(f).find("shutting down"), std::string::npos);
}

// truncate cuts an over-long input to the model's 40 positions: a text keeps [CLS], its first
// 38 tokens and [SEP] (what the 38-word text gives), token ids their first 40.
TEST_F(EmbeddingEngineTest, Truncate) {
  Engine engine(runtime.executor(), bert_config());
  std::string long_text, short_text;
  for (int i = 0; i < 50; ++i)
    long_text += "fox ";
  for (int i = 0; i < 38; ++i)
    short_text += "fox ";
  EmbedRequest cut = texts({long_text, "hello world"});
  cut.truncate = true;
  auto r = engine.embed(cut, asio::use_future).get();
  ASSERT_EQ(r.embeddings.size(), 2u);
  EXPECT_EQ(r.prompt_tokens, 40 + 4);
  auto shorter = engine.embed(texts({short_text}), asio::use_future).get();
  EXPECT_EQ(shorter.prompt_tokens, 40);
  EXPECT_EQ(r.embeddings[0], shorter.embeddings[0]);

  // Token ids: the first 40 of 60 (no special tokens are added to ids).
  std::vector<std::int32_t> ids(60, 100);
  ids.front() = 2;
  EmbedRequest by_ids;
  by_ids.token_ids = {ids};
  auto f = engine.embed(by_ids, asio::use_future);
  EXPECT_NE(error_of(f).find("input[0]: 60 tokens exceed the model's 40 positions"),
            std::string::npos);
  by_ids.truncate = true;
  auto cut_ids = engine.embed(by_ids, asio::use_future).get();
  EXPECT_EQ(cut_ids.prompt_tokens, 40);
  EmbedRequest first40;
  first40.token_ids = {std::vector<std::int32_t>(ids.begin(), ids.begin() + 40)};
  EXPECT_EQ(cut_ids.embeddings[0], engine.embed(first40, asio::use_future).get().embeddings[0]);
}

// device "cuda" runs the encoder on the GPU (tests/actors/cuda/embedding_cuda_test.cpp checks
// its numbers); without a GPU, or in a build without CUDA, the engine refuses with a message
// that says so, never a crash.
TEST_F(EmbeddingEngineTest, CudaDeviceWorksOrSaysWhyNot) {
  EngineConfig c = bert_config();
  c.device = "cuda";
  try {
    Engine engine(runtime.executor(), c);
    auto r = engine.embed(texts({"hello world"}), asio::use_future).get();
    EXPECT_EQ(r.embeddings.at(0).size(), 32u);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
  }
}

TEST_F(EmbeddingEngineTest, DecoderEngineRefusesEmbed) {
  EngineConfig c;
  c.model_dir = std::string(WEFT_SOURCE_DIR) + "/models/weft-tiny";
  c.kv_budget_bytes = 16ll << 20;
  c.cpu_threads = 1;
  Engine engine(runtime.executor(), c);
  EXPECT_FALSE(engine.embeds());
  auto f = engine.embed(texts({"hello"}), asio::use_future);
  EXPECT_NE(error_of(f).find("decoder-only"), std::string::npos);
}

}  // namespace
}  // namespace weft
