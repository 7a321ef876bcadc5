#include "tools/weft/bench_multi_turn.hpp"

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json/array.hpp>
#include <chrono>
#include <cstdio>
#include <future>
#include <random>

#include "tools/weft/bench_stats.hpp"

namespace weft::cli {
namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

struct Conversation {
  std::vector<std::int32_t> history;
  std::mt19937_64 rng;
};

asio::awaitable<void> converse(Engine& engine, Conversation& c, const MultiTurnOptions& o,
                               int index, MultiTurnResult& result) {
  std::uniform_int_distribution<int> token(0, engine.vocab_size() - 1);
  for (int turn = 0; turn < o.turns; ++turn) {
    for (int i = 0; i < o.user_len; ++i)
      c.history.push_back(token(c.rng));
    GenerateRequest r;
    r.prompt_ids = c.history;
    r.sampling.max_tokens = o.output_len;
    r.sampling.ignore_eos = true;
    r.sampling.temperature = o.temperature;
    r.sampling.seed = o.seed * 1000003u + static_cast<std::uint64_t>(index * 1000 + turn);
    result.input_tokens += static_cast<long>(c.history.size());
    ++result.requests;
    const auto start = Clock::now();
    auto last = start;
    int produced = 0;
    double decode_ms = 0;
    bool failed = false;
    try {
      auto stream = co_await engine.submit(std::move(r), asio::use_awaitable);
      for (;;) {
        Event e = co_await stream->next(asio::use_awaitable);
        const auto now = Clock::now();
        if (e.kind == Event::Kind::kFinal) {
          failed = e.finish_reason != FinishReason::kLength;
          result.prompt_tokens_by_turn[static_cast<std::size_t>(turn)] += e.usage.prompt_tokens;
          result.cached_tokens_by_turn[static_cast<std::size_t>(turn)] += e.usage.cached_tokens;
          break;
        }
        const double ms = std::chrono::duration<double, std::milli>(now - last).count();
        if (produced == 0) {
          result.ttft_ms_by_turn[static_cast<std::size_t>(turn)].push_back(ms);
        } else {
          result.itl_ms.push_back(ms);
          decode_ms += ms;
        }
        produced += static_cast<int>(e.token_ids.size());
        c.history.insert(c.history.end(), e.token_ids.begin(), e.token_ids.end());
        last = now;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench: request failed: %s\n", e.what());
      failed = true;
    }
    result.output_tokens += produced;
    if (produced > 1) result.tpot_ms.push_back(decode_ms / (produced - 1));
    if (failed) {
      ++result.failed;
      co_return;  // the conversation cannot go on without this turn's output
    }
  }
}

}  // namespace

MultiTurnResult run_multi_turn(Engine& engine, const asio::any_io_executor& executor,
                               const MultiTurnOptions& o) {
  MultiTurnResult result;
  result.ttft_ms_by_turn.resize(static_cast<std::size_t>(o.turns));
  result.prompt_tokens_by_turn.assign(static_cast<std::size_t>(o.turns), 0);
  result.cached_tokens_by_turn.assign(static_cast<std::size_t>(o.turns), 0);
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int> token(0, engine.vocab_size() - 1);
  std::vector<std::int32_t> system;
  for (int i = 0; i < o.system_len; ++i)
    system.push_back(token(rng));
  std::vector<Conversation> conversations(static_cast<std::size_t>(o.conversations));
  for (int i = 0; i < o.conversations; ++i) {
    conversations[static_cast<std::size_t>(i)].history = system;
    conversations[static_cast<std::size_t>(i)].rng.seed(o.seed * 7919u + static_cast<unsigned>(i));
  }
  // Every coroutine touches `result` on one strand, so counting needs no lock.
  auto strand = asio::make_strand(executor);
  const auto start = Clock::now();
  std::vector<std::future<void>> done;
  for (int i = 0; i < o.conversations; ++i) {
    done.push_back(asio::co_spawn(
        strand, converse(engine, conversations[static_cast<std::size_t>(i)], o, i, result),
        asio::use_future));
  }
  for (auto& f : done)
    f.get();
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

boost::json::object report_multi_turn(const MultiTurnResult& r, const EngineMetrics& m,
                                      const MultiTurnOptions& o) {
  const double hit_rate =
      m.prefix_cache_query_tokens == 0
          ? 0.0
          : static_cast<double>(m.prefix_cache_hit_tokens) / m.prefix_cache_query_tokens;
  std::printf("%d conversations x %d turns (%d requests, %d failed) in %.2f s: %.1f output tok/s\n",
              o.conversations, o.turns, r.requests, r.failed, r.seconds,
              static_cast<double>(r.output_tokens) / r.seconds);
  std::printf(
      "prefix cache: %llu of %llu prompt tokens reused (%.1f%%), %d pages cached, %llu "
      "evicted\n",
      static_cast<unsigned long long>(m.prefix_cache_hit_tokens),
      static_cast<unsigned long long>(m.prefix_cache_query_tokens), 100.0 * hit_rate,
      m.kv_pages_cached, static_cast<unsigned long long>(m.prefix_cache_evictions));
  boost::json::array p50, p99, hits;
  for (std::size_t t = 0; t < r.ttft_ms_by_turn.size(); ++t) {
    const auto& v = r.ttft_ms_by_turn[t];
    p50.push_back(percentile(v, 50));
    p99.push_back(percentile(v, 99));
    const long prompt = r.prompt_tokens_by_turn[t];
    const double hit = prompt > 0 ? static_cast<double>(r.cached_tokens_by_turn[t]) / prompt : 0.0;
    hits.push_back(hit);
    std::printf(
        "turn %zu: prompt %d tokens, %.1f%% cached, TTFT p50 %.1f ms, p99 %.1f ms\n", t + 1,
        o.system_len + static_cast<int>(t + 1) * o.user_len + static_cast<int>(t) * o.output_len,
        100.0 * hit, percentile(v, 50), percentile(v, 99));
  }
  std::vector<double> all;
  for (const auto& v : r.ttft_ms_by_turn)
    all.insert(all.end(), v.begin(), v.end());
  return {{"requests", r.requests},
          {"failed", r.failed},
          {"duration_s", r.seconds},
          {"conversations", o.conversations},
          {"turns", o.turns},
          {"system_prompt_len", o.system_len},
          {"user_len", o.user_len},
          {"output_len", o.output_len},
          {"input_tokens", r.input_tokens},
          {"output_tokens", r.output_tokens},
          {"output_tokens_per_s", static_cast<double>(r.output_tokens) / r.seconds},
          {"ttft_ms_p50", percentile(all, 50)},
          {"ttft_ms_p99", percentile(all, 99)},
          {"ttft_ms_p50_by_turn", p50},
          {"ttft_ms_p99_by_turn", p99},
          {"prefix_cache_hit_rate_by_turn", hits},
          {"tpot_ms_p50", percentile(r.tpot_ms, 50)},
          {"itl_ms_p50", percentile(r.itl_ms, 50)},
          {"prefix_cache_hit_rate", hit_rate},
          {"prefix_cache_hit_tokens", m.prefix_cache_hit_tokens},
          {"prefix_cache_query_tokens", m.prefix_cache_query_tokens},
          {"prefix_cache_evictions", m.prefix_cache_evictions},
          {"kv_pages_cached", m.kv_pages_cached},
          {"peak_kv_pages", m.kv_pages_peak},
          {"kv_pages_total", m.kv_pages_total},
          {"preemptions", m.preemptions},
          {"steps", m.steps}};
}

}  // namespace weft::cli
