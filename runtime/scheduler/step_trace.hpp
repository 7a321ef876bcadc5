#pragma once
// A trace of the batches a scheduler plans (docs/engine.md#step-trace): one JSON line per step
// with what the step runs (running sequences, decode rows and the keys they read, prefill rows),
// who was admitted into it (each by prompt length and max_new_tokens, in admission order) and
// the KV pages held. `weft bench --step-trace FILE` writes it from the engine and
// `sched_sim_bench --step-trace FILE` from the simulation, in the same format, so the two can be
// compared line by line on the same workload file (bench/step_trace_summary.py).

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/scheduler/scheduler.hpp"

namespace weft::sched {

struct StepTraceRecord {
  std::uint64_t step = 0;
  double t_ms = 0;  // since the trace's first step (wall clock, or the simulation's clock)
  int running = 0;  // after the plan: the step's sequences and any that ran out of budget
  int waiting = 0;
  int decode_rows = 0;  // one-token slices past the prompt
  std::int64_t decode_keys = 0;
  int prefill_rows = 0;  // every other token of the step (prompt chunks, recomputes)
  int prefill_sequences = 0;
  int preempted = 0;
  int kv_pages_held = 0;
  struct Admitted {
    int prompt_len = 0;
    int max_new_tokens = 0;
  };
  std::vector<Admitted> admitted;  // in the order the plan admitted them
};

// What `plan` (just returned by scheduler.plan_step(), not completed yet) runs; `step` counts
// the traced steps from 0 (the scheduler's own count includes the empty plans of an idle loop).
StepTraceRecord describe_step(const Scheduler& scheduler, const StepPlan& plan, std::uint64_t step,
                              double t_ms);

// One line of JSON, no newline: {"step":..,"t_ms":..,"running":..,"waiting":..,
// "decode_rows":..,"decode_keys":..,"prefill_rows":..,"prefill_sequences":..,"preempted":..,
// "kv_pages_held":..,"admitted":[[prompt_len,max_new_tokens],..]}.
std::string to_json_line(const StepTraceRecord& r);

// The trace's first line: the settings both sides must share for their steps to compare
// ({"trace":"weft-steps","page_size":..,"kv_pages":..,"max_tokens_per_step":..,
// "max_running":..,"admission":"reserve"|"optimistic","schedule_policy":"fcfs"|"lof",
// "prefix_cache":true|false,"source":..}).
std::string step_trace_header(const SchedulerConfig& config, const std::string& source);

}  // namespace weft::sched
