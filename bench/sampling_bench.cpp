// Time per sampled token for one sequence: greedy, top-k 50, top-p 0.9, and all penalties
// with a 2K-token prompt and 256-512 output tokens, at vocabularies of 32K and 128K tokens.
// Logits are N(0, 1) * 4, which gives a next-token entropy of a few nats like a real model's.
// The row is restored by sample() itself (it holds the raw row on return), so it is reused.

#include <benchmark/benchmark.h>

#include <optional>
#include <random>
#include <vector>

#include "runtime/sampling/sequence_sampler.hpp"

namespace {

using weft::sampling::SamplingParams;
using weft::sampling::SequenceSampler;

std::vector<float> random_logits(std::size_t vocab) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> logits(vocab);
  for (auto& v : logits) {
    v = normal(rng);
  }
  return logits;
}

void run(benchmark::State& state, const SamplingParams& params, bool with_history) {
  const auto vocab = static_cast<std::size_t>(state.range(0));
  std::vector<float> logits = random_logits(vocab);
  std::vector<std::int32_t> prompt;
  if (with_history) {
    std::mt19937 rng(7);
    std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(vocab) - 1);
    for (int i = 0; i < 2048; ++i) {
      prompt.push_back(id(rng));
    }
  }
  // Output history between 256 and 512 tokens: the sampler is rebuilt (untimed) when it has
  // grown past that, so every iteration sees the same amount of penalty work.
  std::optional<SequenceSampler> sampler;
  const auto rebuild = [&] {
    sampler.emplace(params, prompt, 42);
    if (with_history) {
      for (std::int32_t i = 0; i < 256; ++i) {
        sampler->accept(i * 97 % static_cast<std::int32_t>(vocab));
      }
    }
  };
  rebuild();
  for (auto _ : state) {
    if (sampler->generated() >= 512) {
      state.PauseTiming();
      rebuild();
      state.ResumeTiming();
    }
    auto token = sampler->sample(logits);
    benchmark::DoNotOptimize(token);
  }
  state.counters["vocab"] = static_cast<double>(vocab);
}

void BM_Greedy(benchmark::State& state) {
  SamplingParams p;
  p.temperature = 0.0f;
  run(state, p, false);
}

void BM_Temperature(benchmark::State& state) {
  SamplingParams p;
  p.temperature = 0.8f;
  run(state, p, false);
}

void BM_TopK50(benchmark::State& state) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 50;
  run(state, p, false);
}

void BM_TopP09(benchmark::State& state) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  run(state, p, false);
}

void BM_TopP09_MinP(benchmark::State& state) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  run(state, p, false);
}

void BM_Penalties_TopP09(benchmark::State& state) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  p.repetition_penalty = 1.1f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.5f;
  p.logit_bias = {{1, 5.0f}, {2, -100.0f}};
  p.logprobs = 5;
  run(state, p, true);
}

void BM_Greedy_Logprobs5(benchmark::State& state) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = 5;
  run(state, p, false);
}

}  // namespace

BENCHMARK(BM_Greedy)->Arg(32000)->Arg(128256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Greedy_Logprobs5)->Arg(32000)->Arg(128256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Temperature)->Arg(32000)->Arg(128256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopK50)->Arg(32000)->Arg(128256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopP09)->Arg(32000)->Arg(128256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopP09_MinP)->Arg(32000)->Arg(128256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Penalties_TopP09)->Arg(32000)->Arg(128256)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
