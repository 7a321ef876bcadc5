// The scheduler's CPU time per step with many running sequences: plan_step (decode tokens,
// page growth, flat arrays) plus complete_step. Goal (issue 5): under 100 us with 256.
//
//   build/release/bin/scheduler_bench --benchmark_min_time=0.5

#include <benchmark/benchmark.h>

#include "runtime/scheduler/scheduler.hpp"

namespace {

using weft::sched::AdmissionPolicy;
using weft::sched::Scheduler;

// `running` sequences of 512-token prompts, already prefilled, decoding one token per step.
void BM_SchedulerDecodeStep(benchmark::State& state) {
  const int running = static_cast<int>(state.range(0));
  const int page_size = static_cast<int>(state.range(1));
  // Room for 512 + 30000 tokens each: no sequence finishes or runs out of pages during the
  // timed steps (->Iterations below), so every step is a full decode batch; contexts grow
  // from 512 to 2512 tokens over the 2000 timed steps.
  const int max_new = 30000;
  Scheduler scheduler({page_size, running * ((512 + max_new) / page_size + 1), 1 << 16, running,
                       AdmissionPolicy::kReserve});
  for (int i = 0; i < running; ++i) {
    (void)scheduler.add(static_cast<std::uint64_t>(i + 1), std::vector<std::int32_t>(512, 7),
                        max_new);
  }
  // Prefill everything first (not timed).
  std::vector<std::int32_t> sampled;
  while (scheduler.waiting() > 0) {
    auto plan = scheduler.plan_step();
    sampled.assign(static_cast<std::size_t>(plan.sampling_slices()), 1);
    scheduler.complete_step(plan, sampled);
  }
  std::size_t tokens = 0;
  for (auto _ : state) {
    auto plan = scheduler.plan_step();
    sampled.assign(static_cast<std::size_t>(plan.sampling_slices()), 1);
    scheduler.complete_step(plan, sampled);
    tokens = plan.tokens.size();
    benchmark::DoNotOptimize(plan.tokens.data());
  }
  state.counters["tokens_per_step"] = static_cast<double>(tokens);
}
BENCHMARK(BM_SchedulerDecodeStep)
    ->Args({256, 16})
    ->Args({256, 1})
    ->Args({64, 16})
    ->Iterations(2000)
    ->Unit(benchmark::kMicrosecond);

// Admission under reserve mode: the LightLLM estimate runs for each waiting candidate.
void BM_SchedulerAdmitWithReserve(benchmark::State& state) {
  for (auto _ : state) {
    state.PauseTiming();
    Scheduler scheduler({16, 1 << 16, 1 << 16, 256, AdmissionPolicy::kReserve});
    for (int i = 0; i < 256; ++i) {
      (void)scheduler.add(static_cast<std::uint64_t>(i + 1), std::vector<std::int32_t>(64, 7), 256);
    }
    state.ResumeTiming();
    auto plan = scheduler.plan_step();  // admits all 256
    benchmark::DoNotOptimize(plan.tokens.data());
  }
}
BENCHMARK(BM_SchedulerAdmitWithReserve)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
