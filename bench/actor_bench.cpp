// The cost of the actor core: a fire-and-forget message through a strand, and a request with
// a reply awaited by a caller. These bound how fine-grained the engine's messages can be.
//
//   build/release/bin/actor_bench --benchmark_min_time=0.5

#include <benchmark/benchmark.h>

#include <boost/asio/use_future.hpp>
#include <future>

#include "weft/actor.hpp"
#include "weft/runtime.hpp"

namespace {

namespace asio = boost::asio;

class Sink : public weft::Actor {
 public:
  using Actor::Actor;
  void push(long value) {
    post([this, value] { sum_ += value; });
  }
  template <class Token>
  auto sum(Token&& token) {
    return ask([this] { return sum_; }, std::forward<Token>(token));
  }

 private:
  long sum_ = 0;
};

// Messages per second through one actor, sender on another thread, including the drain.
void BM_PostThroughOneActor(benchmark::State& state) {
  weft::Runtime runtime(weft::RuntimeOptions{.worker_threads = 1});
  Sink sink(runtime.executor());
  const long batch = state.range(0);
  for (auto _ : state) {
    for (long i = 0; i < batch; ++i)
      sink.push(i);
    benchmark::DoNotOptimize(sink.sum(asio::use_future).get());
  }
  state.SetItemsProcessed(state.iterations() * batch);
}
BENCHMARK(BM_PostThroughOneActor)->Arg(1024)->UseRealTime();

// One request/reply round trip through a strand and back to a std::future.
void BM_AskRoundTripFuture(benchmark::State& state) {
  weft::Runtime runtime(weft::RuntimeOptions{.worker_threads = 1});
  Sink sink(runtime.executor());
  for (auto _ : state)
    benchmark::DoNotOptimize(sink.sum(asio::use_future).get());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AskRoundTripFuture)->UseRealTime();

// The same round trip with a callback, the cheapest completion token.
void BM_AskRoundTripCallback(benchmark::State& state) {
  weft::Runtime runtime(weft::RuntimeOptions{.worker_threads = 1});
  Sink sink(runtime.executor());
  for (auto _ : state) {
    std::promise<long> done;
    sink.sum([&done](std::exception_ptr, long v) { done.set_value(v); });
    benchmark::DoNotOptimize(done.get_future().get());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AskRoundTripCallback)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
