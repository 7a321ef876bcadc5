// Scheduler settings swept against a simulated device (bench/sched_sim.hpp): the real
// sched::Scheduler plans every step of a workload file, and a virtual clock advances by what
// the step would cost on the GPU the step model was measured on (default: an H100 with the
// Llama-3-8B shape in bf16, docs/PERFORMANCE.md). One line per point of the grid
// (--max-running x --max-tokens-per-step x --admission x --order).
//
//   python3 bench/make_sharegpt_workload.py --out sg.jsonl
//   build/release/bin/sched_sim_bench --dataset sg.jsonl --max-running 128,256,512,1024
//       --max-tokens-per-step 256,512,2048,8192
//   build/release/bin/sched_sim_bench --dataset sg.jsonl --request-rate 8 --num-requests 400
//
// docs/engine.md ("How fast can this workload go") has the sweep and what it says.

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/sched_sim.hpp"

namespace {

using weft::bench::StepCostModel;

constexpr const char* kUsage = R"(usage: sched_sim_bench --dataset FILE [options]

The real scheduler on a virtual clock: each step costs what the step model says a step of its
shape costs (decode rows, keys they read, prefill rows), so a sweep runs in seconds on a CPU.

workload and run
  --dataset FILE            JSON lines {"input_len": N, "output_len": M} (or "prompt_ids")
  --num-requests K          the first K requests (default: all)
  --request-rate R          Poisson arrivals at R requests/s (default 0: all at t = 0, offline)
  --seed S                  arrival times and prompt token ids (default 0)
scheduler settings (comma-separated lists make a grid)
  --max-running LIST        sequences per step at most (default 256)
  --max-tokens-per-step LIST  the step's token budget (default 512)
  --admission LIST          reserve | optimistic (default reserve)
  --order LIST              file | longest: queue offline requests in file order or by output
                            length, longest first (default file)
  --schedule-policy fcfs|lof  the scheduler's queue: arrival order, or longest output first as
                            weft bench --schedule-policy lof (default fcfs)
  --kv-pages N              the KV pool (default 26433: an H100 with the 8B model at
                            --gpu-memory-fraction 0.85)
  --page-size N             tokens per page (default 16)
  --prefix-cache on|off     as weft bench (default on; random prompts never hit)
  --first-step alone|all    offline: the first step runs the first request alone and the rest
                            queue while it runs, as in the engine, whose step loop wakes at the
                            first request (default alone); all: every request queued before it
step model (default: H100, Llama-3-8B bf16, docs/PERFORMANCE.md)
  --decode-points LIST      BATCH:MS decode steps at --decode-context
                            (default 1:6.30,64:8.55,256:15.68,512:27.44)
  --decode-context N        (default 512)
  --kv-point B:CTX:MS       one decode step at a longer context (default 128:2048:19.96)
  --prefill TOKENS:MS       one prefill step (default 512:12.6)
  --overhead-ms X           host time per step the GPU waits for (default 0)
output
  --json                    one JSON object per run instead of the table
  --step-trace FILE         one JSON line per simulated step (one grid point only), as
                            weft bench --step-trace writes them from the engine
)";

[[noreturn]] void fail(const std::string& message) {
  std::cerr << "sched_sim_bench: " << message << "\n";
  std::exit(2);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, sep);)
    out.push_back(item);
  return out;
}

double to_number(const std::string& flag, const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) fail(flag + ": '" + s + "' is not a number");
  return v;
}

int to_int(const std::string& flag, const std::string& s) {
  const double v = to_number(flag, s);
  if (v != static_cast<int>(v) || v < 1) fail(flag + ": '" + s + "' is not an integer >= 1");
  return static_cast<int>(v);
}

std::vector<int> int_list(const std::string& flag, const std::string& s) {
  std::vector<int> out;
  for (const auto& item : split(s, ','))
    out.push_back(to_int(flag, item));
  if (out.empty()) fail(flag + ": empty list");
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dataset;
  int num_requests = 0;
  double rate = 0;
  std::uint64_t seed = 0;
  std::vector<int> running = {256}, budgets = {512};
  std::vector<std::string> admissions = {"reserve"}, orders = {"file"};
  int kv_pages = 26433, page_size = 16;
  bool prefix_cache = true, json = false, first_step_alone = true;
  auto schedule = weft::sched::SchedulePolicy::kFirstCome;
  std::string step_trace_path;
  StepCostModel model = StepCostModel::h100_8b();
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (flag == "--json") {
      json = true;
      continue;
    }
    if (i + 1 >= argc) fail(flag + " needs a value (see --help)");
    const std::string v = argv[++i];
    if (flag == "--dataset") {
      dataset = v;
    } else if (flag == "--step-trace") {
      step_trace_path = v;
    } else if (flag == "--num-requests") {
      num_requests = to_int(flag, v);
    } else if (flag == "--request-rate") {
      rate = to_number(flag, v);
      if (rate < 0) fail("--request-rate must be >= 0");
    } else if (flag == "--seed") {
      seed = static_cast<std::uint64_t>(to_number(flag, v));
    } else if (flag == "--max-running") {
      running = int_list(flag, v);
    } else if (flag == "--max-tokens-per-step") {
      budgets = int_list(flag, v);
    } else if (flag == "--admission" || flag == "--order") {
      auto& list = flag == "--admission" ? admissions : orders;
      list = split(v, ',');
      for (const auto& a : list) {
        const bool ok = flag == "--admission" ? (a == "reserve" || a == "optimistic")
                                              : (a == "file" || a == "longest");
        if (!ok) fail(flag + ": unknown value '" + a + "' (see --help)");
      }
    } else if (flag == "--kv-pages") {
      kv_pages = to_int(flag, v);
    } else if (flag == "--page-size") {
      page_size = to_int(flag, v);
    } else if (flag == "--schedule-policy") {
      if (v != "fcfs" && v != "lof") fail("--schedule-policy: fcfs or lof, not '" + v + "'");
      schedule = v == "lof" ? weft::sched::SchedulePolicy::kLongestOutputFirst
                            : weft::sched::SchedulePolicy::kFirstCome;
    } else if (flag == "--first-step") {
      if (v != "alone" && v != "all") fail("--first-step: alone or all, not '" + v + "'");
      first_step_alone = v == "alone";
    } else if (flag == "--prefix-cache") {
      if (v != "on" && v != "off") fail("--prefix-cache: on or off, not '" + v + "'");
      prefix_cache = v == "on";
    } else if (flag == "--decode-points") {
      model.decode_ms.clear();
      for (const auto& p : split(v, ',')) {
        const auto bm = split(p, ':');
        if (bm.size() != 2) fail("--decode-points: '" + p + "' is not BATCH:MS");
        model.decode_ms.emplace_back(to_int(flag, bm[0]), to_number(flag, bm[1]));
      }
    } else if (flag == "--decode-context") {
      model.decode_context = to_int(flag, v);
    } else if (flag == "--kv-point") {
      const auto p = split(v, ':');
      if (p.size() != 3) fail("--kv-point: '" + v + "' is not BATCH:CONTEXT:MS");
      model.kv_batch = to_int(flag, p[0]);
      model.kv_context = to_int(flag, p[1]);
      model.kv_ms = to_number(flag, p[2]);
    } else if (flag == "--prefill") {
      const auto p = split(v, ':');
      if (p.size() != 2) fail("--prefill: '" + v + "' is not TOKENS:MS");
      model.prefill_tokens = to_int(flag, p[0]);
      model.prefill_ms = to_number(flag, p[1]);
    } else if (flag == "--overhead-ms") {
      model.overhead_ms = to_number(flag, v);
    } else {
      fail("unknown option " + flag + " (see --help)");
    }
  }
  if (dataset.empty()) fail("--dataset FILE is required (see --help)");
  auto cost = weft::bench::fit(model);
  if (!cost) fail(cost.error().what());
  auto requests = weft::bench::read_workload(dataset, num_requests);
  if (!requests) fail(requests.error().what());
  std::ofstream step_trace;
  if (!step_trace_path.empty()) {
    if (orders.size() * admissions.size() * budgets.size() * running.size() != 1)
      fail("--step-trace: give one value of each setting (one run), not a grid");
    step_trace.open(step_trace_path, std::ios::binary | std::ios::trunc);
    if (!step_trace) fail("--step-trace: " + step_trace_path + ": cannot be written");
  }

  if (!json) {
    std::printf("%zu requests from %s, %s; step model: %.1f ns per key, prefill row weight %.3f\n",
                requests->size(), dataset.c_str(),
                rate > 0 ? ("Poisson " + std::to_string(rate) + " req/s").c_str() : "offline",
                cost->ms_per_key * 1e6, cost->prefill_weight);
    std::printf("%7s %7s %10s %7s | %9s %8s %6s %8s %9s %9s %8s %8s %9s %7s | %s\n", "running",
                "budget", "admission", "order", "out tok/s", "time s", "steps", "step ms",
                "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "peak KV", "preempt",
                "sched us/step mean, p99");
  }
  for (const auto& order : orders) {
    for (const auto& admission : admissions) {
      for (int budget : budgets) {
        for (int r : running) {
          weft::bench::SimOptions o;
          o.scheduler.page_size = page_size;
          o.scheduler.num_pages = kv_pages;
          o.scheduler.max_tokens_per_step = budget;
          o.scheduler.max_running = r;
          o.scheduler.admission = admission == "reserve"
                                      ? weft::sched::AdmissionPolicy::kReserve
                                      : weft::sched::AdmissionPolicy::kOptimistic;
          o.scheduler.prefix_cache = prefix_cache;
          o.scheduler.schedule = schedule;
          o.request_rate = rate;
          o.longest_first = order == "longest";
          o.first_step_alone = first_step_alone;
          o.seed = seed;
          if (step_trace.is_open()) o.step_trace = &step_trace;
          auto res = weft::bench::simulate(*requests, *cost, o);
          if (!res) fail(res.error().what());
          const auto& s = *res;
          if (json) {
            std::printf(
                "{\"max_running\":%d,\"max_tokens_per_step\":%d,\"admission\":\"%s\",\"order\":"
                "\"%s\",\"request_rate\":%g,\"requests\":%zu,\"failed\":%d,\"output_tokens\":%lld,"
                "\"duration_s\":%.3f,\"output_tokens_per_s\":%.1f,\"steps\":%lld,"
                "\"mean_step_ms\":%.3f,\"mean_decode_rows\":%.1f,\"ttft_ms_p50\":%.1f,"
                "\"ttft_ms_p99\":%.1f,\"tpot_ms_p50\":%.2f,\"tpot_ms_p99\":%.2f,"
                "\"peak_kv_pages\":%d,\"kv_pages_total\":%d,\"preemptions\":%llu,"
                "\"sched_us_mean\":%.1f,\"sched_us_p99\":%.1f}\n",
                r, budget, admission.c_str(), order.c_str(), rate, requests->size(), s.failed,
                static_cast<long long>(s.output_tokens), s.duration_s, s.output_tok_s,
                static_cast<long long>(s.steps), s.mean_step_ms, s.mean_decode_rows, s.ttft_ms_p50,
                s.ttft_ms_p99, s.tpot_ms_p50, s.tpot_ms_p99, s.peak_held_pages, kv_pages,
                static_cast<unsigned long long>(s.preemptions), s.sched_us_mean, s.sched_us_p99);
          } else {
            std::printf(
                "%7d %7d %10s %7s | %9.0f %8.2f %6lld %8.2f %9.0f %9.0f %8.2f %8.2f %9d %7llu | "
                "%.0f, %.0f\n",
                r, budget, admission.c_str(), order.c_str(), s.output_tok_s, s.duration_s,
                static_cast<long long>(s.steps), s.mean_step_ms, s.ttft_ms_p50, s.ttft_ms_p99,
                s.tpot_ms_p50, s.tpot_ms_p99, s.peak_held_pages,
                static_cast<unsigned long long>(s.preemptions), s.sched_us_mean, s.sched_us_p99);
          }
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}
