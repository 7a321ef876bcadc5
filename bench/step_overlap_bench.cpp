// The step loop's host time as a GPU meets it, serial against overlapped
// (EngineConfig::overlap_steps, docs/engine.md#step-loop), measured on any CPU: the Engine runs
// weft-tiny's tokenizer on a simulated device (tests/actors/simulated_device.hpp) whose forward
// pass is a sleep of --forward-us per step and whose draws cost next to nothing, so the time
// the device sits idle between one step's sampled tokens and the next launch (its "gap") is the
// loop's host time on the critical path. Both loops run the same requests, alternating, and
// must produce the same tokens (the simulated draws depend on each row's context alone).
//
//   build/release/bin/step_overlap_bench --requests 512 --concurrency 256 --forward-us 12000
//
// Prints, per run, steps, mean step ms, output tok/s, the device's mean gap and the loop's
// mean phase times per step (EngineMetrics::step_phases); then the mean of each over the runs.

#include <algorithm>
#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <cstdio>
#include <future>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_args.hpp"
#include "tests/actors/simulated_device.hpp"
#include "weft/engine.hpp"
#include "weft/runtime.hpp"

namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model = std::string(WEFT_SOURCE_DIR) + "/models/weft-tiny";
  int forward_us = 12000;
  int requests = 512;
  int concurrency = 256;
  int input_len = 64;
  int output_len = 128;
  int stop_every = 4;  // every Nth request has stop strings it may meet (0: none)
  int reps = 2;
  std::uint64_t seed = 1;
};

struct RunResult {
  double wall_s = 0;
  long tokens = 0;
  std::uint64_t digest = 14695981039346656037ull;  // over every request's ids, in order
  int failed = 0;
  weft::EngineMetrics metrics;
  double gap_us = 0;  // mean
};

RunResult run(const Options& o, bool overlap, const std::vector<weft::GenerateRequest>& requests) {
  weft::Runtime runtime(weft::RuntimeOptions{.worker_threads = 2});
  weft::EngineConfig config;
  config.model_dir = o.model;
  config.kv_budget_bytes = 1ll << 30;
  config.cpu_threads = 1;
  config.max_running = o.concurrency;
  config.max_tokens_per_step = 2048;
  config.overlap_steps = overlap;
  const auto forward = std::chrono::microseconds(o.forward_us);
  auto stats = std::make_shared<weft::test_support::SimulatedDeviceStats>();
  config.make_backend = [forward, seed = o.seed, stats](const weft::model::Model& model,
                                                        int pages) {
    return std::unique_ptr<weft::model::ForwardBackend>(
        std::make_unique<weft::test_support::SimulatedDevice>(model, pages, forward, seed, stats));
  };
  weft::Engine engine(runtime.executor(), config);
  std::vector<std::vector<std::int32_t>> ids(requests.size());
  std::atomic<std::size_t> next{0};
  std::mutex mutex;
  RunResult r;
  auto client = [&]() -> asio::awaitable<void> {
    for (;;) {
      const std::size_t i = next.fetch_add(1);
      if (i >= requests.size()) co_return;
      std::vector<std::int32_t> out;
      bool failed = false;
      try {
        auto stream = co_await engine.submit(requests[i], asio::use_awaitable);
        for (;;) {
          weft::Event e = co_await stream->next(asio::use_awaitable);
          if (e.kind == weft::Event::Kind::kFinal) {
            failed = e.finish_reason == weft::FinishReason::kError;
            break;
          }
          out.insert(out.end(), e.token_ids.begin(), e.token_ids.end());
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "request %zu failed: %s\n", i, e.what());
        failed = true;
      }
      std::lock_guard lock(mutex);
      r.failed += failed;
      ids[i] = std::move(out);
    }
  };
  const auto start = Clock::now();
  std::vector<std::future<void>> done;
  for (int c = 0; c < o.concurrency; ++c)
    done.push_back(asio::co_spawn(runtime.executor(), client(), asio::use_future));
  for (auto& d : done)
    d.get();
  r.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  r.metrics = engine.metrics(asio::use_future).get();
  engine.shutdown(asio::use_future).get();
  for (const auto& v : ids) {
    r.tokens += static_cast<long>(v.size());
    for (std::int32_t t : v)
      r.digest = (r.digest ^ static_cast<std::uint32_t>(t)) * 1099511628211ull;
    r.digest = (r.digest ^ 0xffu) * 1099511628211ull;
  }
  double sum = 0;
  for (double g : stats->gap_us)
    sum += g;
  r.gap_us = stats->gap_us.empty() ? 0.0 : sum / static_cast<double>(stats->gap_us.size());
  return r;
}

void print(const char* tag, const RunResult& r) {
  const auto& m = r.metrics;
  const auto& p = m.step_phases;
  const double steps = static_cast<double>(std::max<std::uint64_t>(1, m.steps));
  auto mean = [steps](std::uint64_t us) { return static_cast<double>(us) / steps; };
  std::printf(
      "%-10s steps %5llu  step %.3f ms  out %.1f tok/s  device gap %.1f us  digest %016llx  "
      "failed %d\n"
      "%-10s per step us: plan %.1f batch %.1f launch %.1f detok wait %.1f sampler prepare %.1f "
      "sample %.1f sampler finish %.1f complete %.1f finish %.1f gap %.1f; overlapped %llu, "
      "dropped %llu\n",
      tag, static_cast<unsigned long long>(m.steps), r.wall_s * 1000.0 / steps,
      static_cast<double>(r.tokens) / r.wall_s, r.gap_us, static_cast<unsigned long long>(r.digest),
      r.failed, "", mean(p.plan_us), mean(p.batch_us), mean(p.launch_us),
      mean(p.detokenize_wait_us), mean(p.sampler_prepare_us), mean(p.sample_us),
      mean(p.sampler_finish_us), mean(p.complete_us), mean(p.finish_us), mean(p.gap_us),
      static_cast<unsigned long long>(p.overlapped_steps),
      static_cast<unsigned long long>(p.dropped_tokens));
  std::fflush(stdout);
}

int usage() {
  std::fprintf(stderr,
               "usage: step_overlap_bench [--model DIR (weft-tiny)] [--forward-us N (12000)] "
               "[--requests N (512)] [--concurrency N (256)] [--input-len N (64)] "
               "[--output-len N (128)] [--stop-every N (4; 0: no stop strings)] [--reps N (2)]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  weft::bench::ArgCursor args(argc, argv);
  while (args.next()) {
    const std::string& a = args.flag();
    try {
      if (a == "--model")
        o.model = args.value();
      else if (a == "--forward-us")
        o.forward_us = args.number();
      else if (a == "--requests")
        o.requests = args.number();
      else if (a == "--concurrency")
        o.concurrency = args.number();
      else if (a == "--input-len")
        o.input_len = args.number();
      else if (a == "--output-len")
        o.output_len = args.number();
      else if (a == "--stop-every")
        o.stop_every = args.number();
      else if (a == "--reps")
        o.reps = args.number();
      else if (a == "--help" || a == "-h")
        return usage();
      else
        throw std::runtime_error("unknown option " + a);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "step_overlap_bench: %s\n", e.what());
      return usage();
    }
  }
  if (o.requests < 1 || o.concurrency < 1 || o.forward_us < 0 || o.input_len < 1 ||
      o.output_len < 1 || o.reps < 1 || o.stop_every < 0) {
    return usage();
  }
  // Random prompts; output lengths uniform in [output_len / 2, output_len]; every
  // stop_every-th request also stops at any of a few short strings, wherever its text meets one.
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int> token(300, 900);
  std::uniform_int_distribution<int> length(std::max(1, o.output_len / 2), o.output_len);
  std::vector<weft::GenerateRequest> requests(static_cast<std::size_t>(o.requests));
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto& r = requests[i];
    r.prompt_ids.resize(static_cast<std::size_t>(o.input_len));
    for (auto& t : r.prompt_ids)
      t = token(rng);
    r.sampling.temperature = 0.0f;
    r.sampling.max_tokens = length(rng);
    r.sampling.ignore_eos = true;
    if (o.stop_every > 0 && i % static_cast<std::size_t>(o.stop_every) == 0) {
      r.sampling.stop = {"the ", "and", "ing "};
    }
  }
  try {
    std::vector<RunResult> serial, overlapped;
    for (int rep = 0; rep < o.reps; ++rep) {
      for (int k = 0; k < 2; ++k) {
        const bool overlap = (rep + k) % 2 == 1;  // serial first, then alternating
        RunResult r = run(o, overlap, requests);
        print(overlap ? "overlapped" : "serial", r);
        (overlap ? overlapped : serial).push_back(r);
      }
    }
    auto mean_of = [](const std::vector<RunResult>& runs, auto field) {
      double s = 0;
      for (const auto& r : runs)
        s += field(r);
      return s / static_cast<double>(runs.size());
    };
    auto step_ms = [](const RunResult& r) {
      return r.wall_s * 1000.0 / static_cast<double>(std::max<std::uint64_t>(1, r.metrics.steps));
    };
    auto tok_s = [](const RunResult& r) { return static_cast<double>(r.tokens) / r.wall_s; };
    auto gap = [](const RunResult& r) { return r.gap_us; };
    std::printf(
        "mean: serial step %.3f ms, %.1f tok/s, gap %.1f us; overlapped step %.3f ms, %.1f "
        "tok/s, gap %.1f us; same tokens: %s\n",
        mean_of(serial, step_ms), mean_of(serial, tok_s), mean_of(serial, gap),
        mean_of(overlapped, step_ms), mean_of(overlapped, tok_s), mean_of(overlapped, gap),
        serial.front().digest == overlapped.front().digest ? "yes" : "NO");
    return serial.front().digest == overlapped.front().digest ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "step_overlap_bench: %s\n", e.what());
    return 1;
  }
}
