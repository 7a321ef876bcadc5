// Beam search and FSD through the Engine on a GPU (device "cuda:0"), where rows are sampled on
// the device: beam rows and FSD pools come back as candidates (or raw rows) and finish on the
// host, the same engine path as on the CPU (docs/sampling.md). Skips without a GPU.

#include <gtest/gtest.h>

#include <boost/asio/use_future.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "kernels/cuda/device_info.hpp"
#include "runtime/sampling/beam_search.hpp"
#include "tests/actors/collect_stream.hpp"
#include "weft/engine.hpp"
#include "weft/runtime.hpp"

namespace weft {
namespace {

namespace asio = boost::asio;

EngineConfig gpu_config() {
  const char* env = std::getenv("WEFT_TEST_SOURCE_DIR");
  const std::filesystem::path source = env != nullptr && *env != '\0' ? env : WEFT_SOURCE_DIR;
  EngineConfig c;
  c.model_dir = (source / "models/weft-tiny").string();
  c.device = "cuda:0";
  c.kv_budget_bytes = 64ll << 20;
  c.prefix_cache = false;
  return c;
}

bool have_gpu(std::string& why) {
  const auto devices = cuda::visible_devices();
  why = devices.unavailable_reason;
  return !devices.devices.empty();
}

struct Beam {
  std::vector<std::int32_t> ids;
  double sum = 0.0;
  FinishReason reason = FinishReason::kError;
};

std::vector<Beam> collect_beams(const std::shared_ptr<RequestStream>& stream, int n) {
  std::vector<Beam> beams(static_cast<std::size_t>(n));
  for (int finals = 0; finals < n;) {
    Event e = stream->next(asio::use_future).get();
    Beam& b = beams.at(static_cast<std::size_t>(e.index));
    if (e.kind == Event::Kind::kFinal) {
      b.reason = e.finish_reason;
      ++finals;
      continue;
    }
    b.ids.insert(b.ids.end(), e.token_ids.begin(), e.token_ids.end());
    for (const auto& t : e.logprobs)
      b.sum += t.logprob;
  }
  return beams;
}

TEST(CudaBeamSearch, MatchesARecomputingSearchAndFreesEveryPage) {
  std::string why;
  if (!have_gpu(why)) GTEST_SKIP() << "no GPU visible (" << why << ")";
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
  Engine engine(runtime.executor(), gpu_config());
  const int width = 3, max_tokens = 6;
  std::vector<std::int32_t> prompt;
  for (int i = 0; i < 21; ++i)
    prompt.push_back(40 + (i * 37) % 200);
  GenerateRequest request;
  request.prompt_ids = prompt;
  request.sampling.beam_width = width;
  request.sampling.n = width;
  request.sampling.max_tokens = max_tokens;
  request.sampling.ignore_eos = true;
  const auto got = collect_beams(engine.submit(request, asio::use_future).get(), width);
  const auto again = collect_beams(engine.submit(request, asio::use_future).get(), width);

  sampling::BeamSearch search({width, 1.0f, max_tokens, {}});
  while (!search.done()) {
    std::vector<std::vector<sampling::TokenLogprob>> rows;
    for (const auto& beam : search.live()) {
      GenerateRequest r;
      r.prompt_ids = prompt;
      r.prompt_ids.insert(r.prompt_ids.end(), beam.tokens.begin(), beam.tokens.end());
      r.sampling.temperature = 0;
      r.sampling.max_tokens = 1;
      r.sampling.ignore_eos = true;
      r.sampling.logprobs = 20;
      auto c = test_support::collect(engine.submit(r, asio::use_future).get());
      ASSERT_EQ(c.logprobs.size(), 1u);
      rows.push_back(c.logprobs[0].top);
    }
    search.step(rows);
  }
  const auto want = search.best(width);
  ASSERT_EQ(want.size(), static_cast<std::size_t>(width));
  for (int i = 0; i < width; ++i) {
    const auto& g = got[static_cast<std::size_t>(i)];
    EXPECT_EQ(g.reason, FinishReason::kLength);
    EXPECT_EQ(g.ids.size(), static_cast<std::size_t>(max_tokens));
    // bf16 logits differ a little between a decode on forked pages and a fresh prefill, so
    // near-ties may order beams differently: the scores must agree, the tokens usually do.
    EXPECT_NEAR(g.sum / max_tokens, want[static_cast<std::size_t>(i)].score, 0.05) << "beam " << i;
    EXPECT_EQ(g.ids, again[static_cast<std::size_t>(i)].ids) << "beam search is deterministic";
  }
  const EngineMetrics m = engine.metrics(asio::use_future).get();
  EXPECT_EQ(m.kv_pages_used, 0) << "pages not freed";
}

TEST(CudaFsd, IsDeterministicOnTheDevice) {
  std::string why;
  if (!have_gpu(why)) GTEST_SKIP() << "no GPU visible (" << why << ")";
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
  Engine engine(runtime.executor(), gpu_config());
  GenerateRequest request;
  request.prompt = "Call me Ishmael.";
  request.sampling.fsd = sampling::Fsd::kFsd;
  request.sampling.max_tokens = 16;
  request.sampling.ignore_eos = true;
  auto a = test_support::collect(engine.submit(request, asio::use_future).get());
  auto b = test_support::collect(engine.submit(request, asio::use_future).get());
  EXPECT_EQ(a.reason, FinishReason::kLength);
  EXPECT_EQ(a.ids.size(), 16u);
  EXPECT_EQ(a.ids, b.ids);
  request.sampling.fsd = sampling::Fsd::kRandomized;
  request.sampling.temperature = 1.0f;
  request.sampling.seed = 5;
  auto c = test_support::collect(engine.submit(request, asio::use_future).get());
  auto d = test_support::collect(engine.submit(request, asio::use_future).get());
  EXPECT_EQ(c.ids, d.ids) << "randomized FSD is seeded";
}

}  // namespace
}  // namespace weft
