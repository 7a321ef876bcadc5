#pragma once
// The real scheduler (sched::Scheduler) against a simulated device on a virtual clock: each
// planned step advances the clock by what a step of that shape costs under a model fitted to
// measured GPU step times, so a 1,000-request ShareGPT-shaped run takes well under a second
// of CPU and a sweep of scheduler settings runs on any machine (bench/sched_sim_bench.cpp,
// docs/engine.md "How fast can this workload go").
//
// The step model is the one bench/sharegpt_bound.py bounds with: a step with B decode rows
// reading K keys and P prefill rows costs N(B + w P) + c K + overhead, where N interpolates
// the measured decode steps at one context less their KV reads, c comes from one decode step
// at a longer context and w from one prefill step (a prefill row computes no head and no
// sample). Here N passes through the measured points (a prediction, not a lower bound).

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "runtime/scheduler/scheduler.hpp"
#include "weft/error.hpp"

namespace weft::bench {

struct StepCostModel {
  int decode_context = 512;
  std::vector<std::pair<int, double>> decode_ms;  // (batch, ms per decode step) at decode_context
  int kv_batch = 128, kv_context = 2048;
  double kv_ms = 19.96;
  int prefill_tokens = 512;
  double prefill_ms = 12.6;
  double overhead_ms = 0.0;  // host time per step the device idles for

  // The H100 figures of docs/PERFORMANCE.md (Llama-3-8B shape, bf16).
  static StepCostModel h100_8b();
};

// The model's derived terms (fit() checks the points and fails with a message naming them).
struct FittedCost {
  std::vector<std::pair<double, double>> rows_ms;  // N: (rows, ms) without KV reads
  double ms_per_key = 0;
  double prefill_weight = 1;
  double overhead_ms = 0;
  double step_ms(double decode_rows, double keys, double prefill_rows) const;
  double rows_ms_at(double rows) const;
};
Result<FittedCost> fit(const StepCostModel& model);

struct SimRequest {
  int input_len = 0;
  int output_len = 0;
  double arrival_s = 0;
};

// JSON-lines workload ({"input_len": N, "output_len": M} or {"prompt_ids": [...], ...}); errors
// name the file and line. num_requests > 0 keeps the first that many.
Result<std::vector<SimRequest>> read_workload(const std::string& path, int num_requests);

struct SimOptions {
  sched::SchedulerConfig scheduler;  // page_size, num_pages, budgets, admission, prefix cache
  double request_rate = 0;           // 0: every request at t = 0 (offline); else Poisson
  bool longest_first = false;        // queue requests by output length, longest first (offline)
  // Offline: the first step runs the first request alone and the others are queued while it
  // runs, as in the engine (its step loop wakes at the first request; weft bench hands over the
  // rest while that step runs). False: every request is queued before the first step.
  bool first_step_alone = true;
  std::uint64_t seed = 0;
  int vocab = 128256;  // prompt tokens are seeded random ids below this (no prefix hits)
  // Not null: one line per step (runtime/scheduler/step_trace.hpp), after a header line, as
  // `weft bench --step-trace` writes them from the engine.
  std::ostream* step_trace = nullptr;
};

struct SimResult {
  double duration_s = 0;
  std::int64_t steps = 0;
  std::int64_t output_tokens = 0;
  std::int64_t input_tokens = 0;
  double output_tok_s = 0;
  double ttft_ms_p50 = 0, ttft_ms_p99 = 0;
  double tpot_ms_p50 = 0, tpot_ms_p99 = 0;
  double mean_step_ms = 0, mean_decode_rows = 0;
  int peak_held_pages = 0;
  std::uint64_t preemptions = 0;
  int failed = 0;  // requests the scheduler refused (too large for the pool)
  // The scheduler's own CPU time per step on this machine (plan_step, complete_step and the
  // removal of finished requests: what the engine's step loop runs between two launches).
  double sched_us_mean = 0, sched_us_p99 = 0;
};

// Runs the workload to the end on a fresh scheduler and the virtual clock.
Result<SimResult> simulate(const std::vector<SimRequest>& requests, const FittedCost& cost,
                           const SimOptions& options);

}  // namespace weft::bench
