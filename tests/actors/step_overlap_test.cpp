// The overlapped step loop (EngineConfig::overlap_steps, docs/engine.md#step-loop) against the
// serial one: a step's text is made while the next step runs, so a stop string found in it
// ends a sequence that the next step, already launched, still runs. That step's token must be
// dropped and the output must be exactly what the serial loop gives (text, ids, finish reason,
// usage), with every KV page back.

#include <gtest/gtest.h>

#include <boost/asio/use_future.hpp>
#include <chrono>
#include <random>

#include "tests/actors/collect_stream.hpp"
#include "tests/actors/simulated_device.hpp"
#include "tests/actors/tiny_engine.hpp"
#include "weft/engine.hpp"
#include "weft/runtime.hpp"

namespace weft {
namespace {

namespace asio = boost::asio;

using test_support::collect;
using test_support::Collected;
using test_support::tiny_config;

struct EngineRun {
  std::vector<Collected> outputs;  // per request
  EngineMetrics metrics;           // after every request ended
};

// Every request submitted at once (so they share steps), each collected in turn.
EngineRun run(EngineConfig config, const std::vector<GenerateRequest>& requests) {
  Runtime runtime(RuntimeOptions{.worker_threads = 2});
  Engine engine(runtime.executor(), std::move(config));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& r : requests)
    streams.push_back(engine.submit(r, asio::use_future).get());
  EngineRun out;
  for (const auto& s : streams)
    out.outputs.push_back(collect(s));
  out.metrics = engine.metrics(asio::use_future).get();
  engine.shutdown(asio::use_future).get();
  return out;
}

// A piece of `text` whose first occurrence starts in its third quarter: as a stop string, it
// ends the output there, well before its length. Empty when there is none.
std::string stop_in_second_half(const std::string& text) {
  for (std::size_t at = text.size() / 2; at + 3 <= text.size() * 3 / 4; ++at) {
    const std::string piece = text.substr(at, 3);
    if (text.find(piece) == at) return piece;
  }
  return {};
}

void expect_same_outputs(const EngineRun& serial, const EngineRun& overlapped) {
  ASSERT_EQ(serial.outputs.size(), overlapped.outputs.size());
  for (std::size_t i = 0; i < serial.outputs.size(); ++i) {
    const Collected& a = serial.outputs[i];
    const Collected& b = overlapped.outputs[i];
    EXPECT_EQ(a.text, b.text) << "request " << i;
    EXPECT_EQ(a.ids, b.ids) << "request " << i;
    EXPECT_EQ(a.reason, b.reason) << "request " << i;
    EXPECT_EQ(a.error, b.error) << "request " << i;
    EXPECT_EQ(a.usage.prompt_tokens, b.usage.prompt_tokens) << "request " << i;
    EXPECT_EQ(a.usage.completion_tokens, b.usage.completion_tokens) << "request " << i;
    EXPECT_EQ(a.usage.cached_tokens, b.usage.cached_tokens) << "request " << i;
  }
  for (const EngineRun* r : {&serial, &overlapped}) {
    EXPECT_EQ(r->metrics.kv_pages_used, 0);
    EXPECT_EQ(r->metrics.running, 0);
    EXPECT_EQ(r->metrics.finished_error, 0u);
  }
  EXPECT_EQ(serial.metrics.finished_stop, overlapped.metrics.finished_stop);
  EXPECT_EQ(serial.metrics.finished_length, overlapped.metrics.finished_length);
  EXPECT_EQ(serial.metrics.generated_tokens, overlapped.metrics.generated_tokens);
  EXPECT_EQ(serial.metrics.step_phases.overlapped_steps, 0u);
  EXPECT_EQ(serial.metrics.step_phases.dropped_tokens, 0u);
  EXPECT_GT(overlapped.metrics.step_phases.overlapped_steps, 0u);
}

// A device whose draws depend on each row's context alone (tests/actors/simulated_device.hpp),
// so that the batch the overlapped loop runs (a stopped sequence stays one step longer) cannot
// change another request's tokens: every difference would be the loop's.
EngineConfig simulated(bool overlap) {
  EngineConfig c = tiny_config();
  c.overlap_steps = overlap;
  c.make_backend = [](const model::Model& model, int pages) {
    return std::unique_ptr<model::ForwardBackend>(std::make_unique<test_support::SimulatedDevice>(
        model, pages, std::chrono::microseconds(500), 7));
  };
  return c;
}

TEST(StepOverlapTest, StopStringEndingASequenceInFlightGivesTheSerialOutput) {
  constexpr int kRequests = 12;
  std::mt19937 rng(5);
  std::vector<GenerateRequest> requests(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    GenerateRequest& r = requests[static_cast<std::size_t>(i)];
    r.prompt_ids.resize(static_cast<std::size_t>(6 + i % 5));
    for (auto& t : r.prompt_ids)
      t = static_cast<std::int32_t>(300 + rng() % 200);
    r.sampling.temperature = 0.0f;
    r.sampling.max_tokens = 48 + 4 * i;
    r.sampling.ignore_eos = true;
  }
  // Free runs: each request's text, from which a stop string in its second half is taken.
  const EngineRun free_run = run(simulated(false), requests);
  int stopping = 0;
  for (int i = 0; i < kRequests; ++i) {
    const std::string stop =
        stop_in_second_half(free_run.outputs[static_cast<std::size_t>(i)].text);
    if (stop.empty() || i % 4 == 3) continue;  // every fourth request runs to its length
    requests[static_cast<std::size_t>(i)].sampling.stop = {stop};
    ++stopping;
  }
  ASSERT_GE(stopping, kRequests / 2) << "the simulated device's text has too few stop strings";

  const EngineRun serial = run(simulated(false), requests);
  const EngineRun overlapped = run(simulated(true), requests);
  expect_same_outputs(serial, overlapped);
  int stopped = 0;
  for (int i = 0; i < kRequests; ++i) {
    const Collected& c = overlapped.outputs[static_cast<std::size_t>(i)];
    if (requests[static_cast<std::size_t>(i)].sampling.stop.empty()) {
      EXPECT_EQ(c.reason, FinishReason::kLength) << "request " << i;
      continue;
    }
    EXPECT_EQ(c.reason, FinishReason::kStop) << "request " << i;
    EXPECT_LT(c.usage.completion_tokens, requests[static_cast<std::size_t>(i)].sampling.max_tokens);
    ++stopped;
  }
  EXPECT_EQ(stopped, stopping);
  // Each stop string was found while the next step, already launched, ran its sequence: that
  // step's token was dropped.
  EXPECT_EQ(overlapped.metrics.step_phases.dropped_tokens, static_cast<std::uint64_t>(stopping));
}

// The same on weft-tiny's real forward pass on the CPU, one request (so the batches of the two
// loops differ only by the stopped sequence's extra step); then two length-ended requests,
// which the overlapped loop retires before their last text is out.
TEST(StepOverlapTest, CpuStopStringAndLengthGiveTheSerialOutput) {
  GenerateRequest request;
  request.prompt = "Call me Ishmael.";
  request.sampling.temperature = 0.0f;
  request.sampling.max_tokens = 40;
  EngineConfig serial_config = tiny_config();
  serial_config.overlap_steps = false;
  const EngineRun free_run = run(serial_config, {request});
  const std::string stop = stop_in_second_half(free_run.outputs[0].text);
  ASSERT_FALSE(stop.empty()) << free_run.outputs[0].text;
  request.sampling.stop = {stop};

  const EngineRun serial = run(serial_config, {request});
  EngineConfig overlap_config = tiny_config();
  ASSERT_TRUE(overlap_config.overlap_steps) << "the default";
  const EngineRun overlapped = run(overlap_config, {request});
  expect_same_outputs(serial, overlapped);
  EXPECT_EQ(overlapped.outputs[0].reason, FinishReason::kStop);
  EXPECT_EQ(overlapped.metrics.step_phases.dropped_tokens, 1u);

  // Length-ended requests (retired before their last text is out) beside each other.
  GenerateRequest a = request, b = request;
  a.sampling.stop.clear();
  a.sampling.max_tokens = 7;
  b.sampling.stop.clear();
  b.sampling.max_tokens = 19;
  expect_same_outputs(run(serial_config, {a, b}), run(overlap_config, {a, b}));
}

// Each phase of the step loop is timed, and the phases the loop passes every step are non-zero.
TEST(StepOverlapTest, StepPhasesAreCounted) {
  GenerateRequest request;
  request.prompt = "Call me Ishmael.";
  request.sampling.max_tokens = 12;
  request.sampling.ignore_eos = true;
  const EngineRun r = run(tiny_config(), {request});
  const StepPhaseTimes& p = r.metrics.step_phases;
  ASSERT_GT(r.metrics.steps, 0u);
  EXPECT_GT(p.launch_us, 0u) << "on the CPU the launch runs the forward pass";
  EXPECT_GT(p.step_us, 0u);
  EXPECT_GT(p.gap_us, 0u) << "12 tokens: steps follow steps";
  EXPECT_GE(p.step_us, p.plan_us + p.batch_us + p.launch_us + p.sample_us);
  EXPECT_EQ(p.mask_wait_us, 0u) << "no constrained rows";
  EXPECT_EQ(p.accept_wait_us, 0u);
  EXPECT_GT(p.overlapped_steps, 0u);
}

}  // namespace
}  // namespace weft
