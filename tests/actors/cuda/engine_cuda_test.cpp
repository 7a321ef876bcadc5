// The Engine on a GPU (device "cuda:0"), which samples on the device: a seeded request gives
// the same tokens again, greedy tokens do not depend on the batch, logprobs come back, and a
// JSON Schema's bitmasks are applied on the device. Skips without a GPU (scripts/gpu-check runs it
// on the device).

#include <gtest/gtest.h>

#include <boost/asio/use_future.hpp>
#include <cstdlib>
#include <filesystem>

#include "kernels/cuda/device_info.hpp"
#include "tests/actors/collect_stream.hpp"
#include "weft/engine.hpp"
#include "weft/runtime.hpp"

namespace weft {
namespace {

namespace asio = boost::asio;

using test_support::collect;
using test_support::Collected;

EngineConfig gpu_config() {
  const char* env = std::getenv("WEFT_TEST_SOURCE_DIR");
  const std::filesystem::path source = env != nullptr && *env != '\0' ? env : WEFT_SOURCE_DIR;
  EngineConfig c;
  c.model_dir = (source / "models/weft-tiny").string();
  c.device = "cuda:0";
  c.kv_budget_bytes = 64ll << 20;
  return c;
}

GenerateRequest sampled(std::string prompt, std::uint64_t seed, int max_tokens) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0.9f;
  r.sampling.top_p = 0.95f;
  r.sampling.seed = seed;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

#define SKIP_WITHOUT_GPU()                                                                 \
  do {                                                                                     \
    const auto devices = cuda::visible_devices();                                          \
    if (devices.devices.empty()) {                                                         \
      GTEST_SKIP() << "no GPU visible (" << devices.unavailable_reason                     \
                   << "): GPU checks run on the device machine through scripts/gpu-check"; \
    }                                                                                      \
  } while (0)

// A seeded request's draws come from its own row, so the same request gives the same tokens
// again; the logits themselves are bitwise the same only for the same batch shape (cuBLAS
// chooses its algorithm by the number of rows), so across batches the check is greedy's.
TEST(CudaEngine, SeededRequestIsReproducibleAndGreedyIsBatchInvariant) {
  SKIP_WITHOUT_GPU();
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
  Engine engine(runtime.executor(), gpu_config());
  GenerateRequest seeded = sampled("Call me Ishmael. Some years ago", 11, 48);
  seeded.sampling.logprobs = 3;
  const Collected first = collect(engine.submit(seeded, asio::use_future).get());
  ASSERT_EQ(first.reason, FinishReason::kLength) << first.error;
  ASSERT_EQ(first.ids.size(), 48u);
  ASSERT_EQ(first.logprobs.size(), 48u);
  for (const auto& lp : first.logprobs) {
    EXPECT_LE(lp.logprob, 1e-4f);
    ASSERT_EQ(lp.top.size(), 3u);
    EXPECT_GE(lp.top[0].logprob, lp.top[1].logprob);
    EXPECT_GE(lp.top[1].logprob, lp.top[2].logprob);
  }
  const Collected again = collect(engine.submit(seeded, asio::use_future).get());
  EXPECT_EQ(again.ids, first.ids);

  GenerateRequest greedy = sampled("Call me Ishmael. Some years ago", 0, 32);
  greedy.sampling.temperature = 0;
  const Collected alone = collect(engine.submit(greedy, asio::use_future).get());
  std::vector<std::shared_ptr<RequestStream>> others;
  for (int i = 0; i < 15; ++i) {
    GenerateRequest r = sampled("The whale number " + std::to_string(i), 100 + i, 20 + 3 * i);
    r.sampling.top_k = i % 3 == 0 ? 40 : 0;
    r.sampling.repetition_penalty = i % 4 == 0 ? 1.2f : 1.0f;
    others.push_back(engine.submit(r, asio::use_future).get());
    if (i == 7) others.push_back(engine.submit(greedy, asio::use_future).get());
  }
  Collected batched;
  for (std::size_t i = 0; i < others.size(); ++i) {
    Collected c = collect(others[i]);
    EXPECT_EQ(c.reason, FinishReason::kLength) << c.error;
    if (i == 8) batched = std::move(c);
  }
  EXPECT_EQ(batched.ids, alone.ids);
  EngineMetrics m = engine.metrics(asio::use_future).get();
  EXPECT_EQ(m.finished_error, 0u);
}

TEST(CudaEngine, JsonSchemaMasksApplyOnTheDevice) {
  SKIP_WITHOUT_GPU();
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
  Engine engine(runtime.executor(), gpu_config());
  GenerateRequest r;
  r.prompt = "The whale";
  r.sampling.temperature = 1.0f;
  r.sampling.n = 8;
  r.sampling.seed = 3;
  r.sampling.max_tokens = 80;
  r.response_format.type = ResponseFormat::Type::kJsonSchema;
  r.response_format.source =
      R"({"type":"object","properties":{"kind":{"enum":["whale","ship"]},
      "size":{"type":"integer","minimum":0,"maximum":999}},"required":["kind","size"]})";
  auto stream = engine.submit(r, asio::use_future).get();
  std::vector<std::string> texts(8);
  std::vector<FinishReason> reasons(8, FinishReason::kError);
  int finals = 0;
  while (finals < 8) {
    Event e = stream->next(asio::use_future).get();
    if (e.kind == Event::Kind::kFinal) {
      reasons[e.index] = e.finish_reason;
      ++finals;
    } else {
      texts[e.index] += e.text;
    }
  }
  int stopped = 0;
  for (int i = 0; i < 8; ++i) {
    ASSERT_NE(reasons[i], FinishReason::kError) << texts[i];
    if (reasons[i] != FinishReason::kStop) continue;
    ++stopped;
    // Compact JSON with both required properties and nothing else.
    EXPECT_TRUE(texts[i].starts_with("{\"")) << texts[i];
    EXPECT_TRUE(texts[i].ends_with("}")) << texts[i];
    EXPECT_NE(texts[i].find("\"kind\":\""), std::string::npos) << texts[i];
    EXPECT_NE(texts[i].find("\"size\":"), std::string::npos) << texts[i];
    EXPECT_EQ(texts[i].find(' '), std::string::npos) << texts[i];
  }
  EXPECT_GT(stopped, 0);
  EngineMetrics m = engine.metrics(asio::use_future).get();
  EXPECT_GT(m.constrained_steps, 0u);
}

}  // namespace
}  // namespace weft
