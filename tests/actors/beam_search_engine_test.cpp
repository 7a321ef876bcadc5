// Beam search through the Engine on weft-tiny (CPU): the beams' forked KV pages give the same
// search as a reference that recomputes every prefix from scratch, every page is freed at the
// end, the prompt's full pages are shared rather than copied, and a cancelled search ends all
// its samples.

#include <gtest/gtest.h>

#include <boost/asio/use_future.hpp>
#include <cmath>
#include <map>
#include <vector>

#include "runtime/sampling/beam_search.hpp"
#include "tests/actors/collect_stream.hpp"
#include "tests/actors/tiny_engine.hpp"
#include "weft/engine.hpp"
#include "weft/runtime.hpp"

namespace weft {
namespace {

namespace asio = boost::asio;
using test_support::tiny_config;

struct Beam {
  std::vector<std::int32_t> ids;
  double sum = 0.0;
  FinishReason reason = FinishReason::kError;
  int completion_tokens = -1;
};

std::vector<Beam> collect_beams(const std::shared_ptr<RequestStream>& stream, int n) {
  std::vector<Beam> beams(static_cast<std::size_t>(n));
  for (int finals = 0; finals < n;) {
    Event e = stream->next(asio::use_future).get();
    Beam& b = beams.at(static_cast<std::size_t>(e.index));
    if (e.kind == Event::Kind::kFinal) {
      b.reason = e.finish_reason;
      b.completion_tokens = e.usage.completion_tokens;
      ++finals;
      continue;
    }
    b.ids.insert(b.ids.end(), e.token_ids.begin(), e.token_ids.end());
    for (const auto& t : e.logprobs)
      b.sum += t.logprob;
  }
  return beams;
}

std::vector<std::int32_t> prompt_ids(int n) {
  std::vector<std::int32_t> ids;
  for (int i = 0; i < n; ++i)
    ids.push_back(40 + (i * 37) % 200);
  return ids;
}

class BeamSearchEngineTest : public ::testing::Test {
 protected:
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
};

TEST_F(BeamSearchEngineTest, MatchesASearchThatRecomputesEveryPrefix) {
  EngineConfig config = tiny_config();
  config.prefix_cache = false;  // the reference's prefixes compute from scratch
  Engine engine(runtime.executor(), config);
  const int width = 3, max_tokens = 6;
  const std::vector<std::int32_t> prompt = prompt_ids(21);
  GenerateRequest request;
  request.prompt_ids = prompt;
  request.sampling.beam_width = width;
  request.sampling.n = width;
  request.sampling.max_tokens = max_tokens;
  request.sampling.ignore_eos = true;  // every beam runs to max_tokens: no stop tokens
  const std::vector<Beam> got =
      collect_beams(engine.submit(request, asio::use_future).get(), width);

  // The reference: the same policy, each row from a fresh one-token request over prompt +
  // prefix (its top 20 raw logprobs; no bias or penalties, so these are the beam's logprobs).
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
    const auto& w = want[static_cast<std::size_t>(i)];
    EXPECT_EQ(g.ids, w.beam.tokens) << "beam " << i;
    EXPECT_NEAR(g.sum, w.beam.sum, 1e-3) << "beam " << i;
    EXPECT_EQ(g.reason, FinishReason::kLength);
    EXPECT_EQ(g.completion_tokens, max_tokens);
  }
  const EngineMetrics m = engine.metrics(asio::use_future).get();
  EXPECT_EQ(m.kv_pages_used, 0) << "pages not freed";
  EXPECT_EQ(m.running, 0);
}

// A single-token request's top 20 logprobs after prompt + prefix, computed from scratch.
std::vector<sampling::TokenLogprob> fresh_row(Engine& engine, std::vector<std::int32_t> ids) {
  GenerateRequest r;
  r.prompt_ids = std::move(ids);
  r.sampling.temperature = 0;
  r.sampling.max_tokens = 1;
  r.sampling.ignore_eos = true;
  r.sampling.logprobs = 20;
  auto c = test_support::collect(engine.submit(r, asio::use_future).get());
  EXPECT_EQ(c.logprobs.size(), 1u);
  return c.logprobs.empty() ? std::vector<sampling::TokenLogprob>{} : c.logprobs[0].top;
}

TEST_F(BeamSearchEngineTest, StopTokensEndHypothesesAsTheReferenceDoes) {
  EngineConfig config = tiny_config();
  config.prefix_cache = false;
  Engine engine(runtime.executor(), config);
  const std::vector<std::int32_t> prompt = prompt_ids(17);
  // The stop token: greedy's second token, so that some hypotheses end with it (finish
  // reason stop) while others run to max_tokens.
  GenerateRequest g;
  g.prompt_ids = prompt;
  g.sampling.temperature = 0;
  g.sampling.max_tokens = 2;
  g.sampling.ignore_eos = true;
  const auto greedy = test_support::collect(engine.submit(g, asio::use_future).get());
  ASSERT_EQ(greedy.ids.size(), 2u);
  const std::int32_t stop = greedy.ids[1];

  const int width = 3, max_tokens = 5;
  GenerateRequest request;
  request.prompt_ids = prompt;
  request.sampling.beam_width = width;
  request.sampling.n = width;
  request.sampling.max_tokens = max_tokens;
  request.sampling.ignore_eos = true;
  request.sampling.stop_token_ids = {stop};
  request.sampling.length_penalty = 0.0f;
  const std::vector<Beam> got =
      collect_beams(engine.submit(request, asio::use_future).get(), width);

  sampling::BeamSearch search({width, 0.0f, max_tokens, {stop}});
  while (!search.done()) {
    std::vector<std::vector<sampling::TokenLogprob>> rows;
    for (const auto& beam : search.live()) {
      std::vector<std::int32_t> ids = prompt;
      ids.insert(ids.end(), beam.tokens.begin(), beam.tokens.end());
      rows.push_back(fresh_row(engine, ids));
    }
    search.step(rows);
  }
  const auto want = search.best(width);
  ASSERT_EQ(want.size(), static_cast<std::size_t>(width));
  int stopped = 0;
  for (int i = 0; i < width; ++i) {
    const Beam& b = got[static_cast<std::size_t>(i)];
    const auto& w = want[static_cast<std::size_t>(i)];
    EXPECT_EQ(b.ids, w.beam.tokens) << "beam " << i;
    EXPECT_NEAR(b.sum, w.beam.sum, 1e-3) << "beam " << i;
    EXPECT_EQ(b.reason, w.stopped ? FinishReason::kStop : FinishReason::kLength) << "beam " << i;
    stopped += w.stopped ? 1 : 0;
  }
  EXPECT_GE(stopped, 1) << "no hypothesis ended with the stop token: the test lost its point";
  EXPECT_EQ(engine.metrics(asio::use_future).get().kv_pages_used, 0);
}

TEST_F(BeamSearchEngineTest, SharesThePromptsFullPagesAndFreesThemAll) {
  EngineConfig config = tiny_config();
  config.prefix_cache = false;
  config.page_size = 16;
  Engine engine(runtime.executor(), config);
  // 40 prompt tokens + 8 output: 3 pages a sequence. Four beams copying the prompt would hold
  // 12; sharing its two full pages, at most 2 + 4 (each beam's own last page).
  GenerateRequest request;
  request.prompt_ids = prompt_ids(40);
  request.sampling.beam_width = 4;
  request.sampling.max_tokens = 8;
  request.sampling.ignore_eos = true;
  const auto beams = collect_beams(engine.submit(request, asio::use_future).get(), 1);
  EXPECT_EQ(beams[0].ids.size(), 8u);
  const EngineMetrics m = engine.metrics(asio::use_future).get();
  EXPECT_EQ(m.kv_pages_used, 0) << "pages not freed";
  EXPECT_LE(m.kv_pages_peak, 6);
  EXPECT_GE(m.kv_pages_peak, 4);  // the beams did fork
}

TEST_F(BeamSearchEngineTest, CancelEndsEverySampleAndFreesThePages) {
  EngineConfig config = tiny_config();
  config.prefix_cache = false;
  Engine engine(runtime.executor(), config);
  GenerateRequest request;
  request.prompt_ids = prompt_ids(30);
  request.sampling.beam_width = 4;
  request.sampling.n = 2;
  request.sampling.max_tokens = 200;
  request.sampling.ignore_eos = true;
  auto stream = engine.submit(request, asio::use_future).get();
  engine.cancel(stream->id());
  const auto beams = collect_beams(stream, 2);
  for (const auto& b : beams) {
    EXPECT_EQ(b.reason, FinishReason::kCancelled);
  }
  // The cancel is posted before the metrics ask: both run on the scheduler's strand in order.
  const EngineMetrics m = engine.metrics(asio::use_future).get();
  EXPECT_EQ(m.kv_pages_used, 0);
  EXPECT_EQ(m.running, 0);
}

TEST_F(BeamSearchEngineTest, RefusesWhatItCannotDo) {
  Engine engine(runtime.executor(), tiny_config());
  GenerateRequest request;
  request.prompt = "Call me Ishmael.";
  request.sampling.beam_width = 2;
  request.sampling.n = 3;
  EXPECT_THROW(engine.submit(request, asio::use_future).get(), Error);
  request.sampling.n = 1;
  request.response_format.type = ResponseFormat::Type::kJsonObject;
  try {
    engine.submit(request, asio::use_future).get();
    ADD_FAILURE() << "beam search with a response_format was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("beam_width"), std::string::npos) << e.what();
  }
}

TEST_F(BeamSearchEngineTest, FsdRunsThroughTheEngine) {
  Engine engine(runtime.executor(), tiny_config());
  GenerateRequest request;
  request.prompt = "Call me Ishmael.";
  request.sampling.fsd = sampling::Fsd::kFsd;
  request.sampling.max_tokens = 12;
  request.sampling.ignore_eos = true;
  auto a = test_support::collect(engine.submit(request, asio::use_future).get());
  auto b = test_support::collect(engine.submit(request, asio::use_future).get());
  EXPECT_EQ(a.reason, FinishReason::kLength);
  EXPECT_EQ(a.ids.size(), 12u);
  EXPECT_EQ(a.ids, b.ids) << "FSD is deterministic";
}

}  // namespace
}  // namespace weft
