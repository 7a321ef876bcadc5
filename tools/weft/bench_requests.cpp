#include "tools/weft/bench_requests.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <exception>

namespace weft::cli {
namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

// Reads a submitted request's events to its final one (`error`: the submission failed).
asio::awaitable<void> read_request(std::exception_ptr error, std::shared_ptr<RequestStream> stream,
                                   bool constrained, Clock::time_point submitted,
                                   RequestTimes& times, ProgressBar& progress) {
  auto last = submitted;
  try {
    if (error) std::rethrow_exception(error);
    for (;;) {
      Event e = co_await stream->next(asio::use_awaitable);
      const auto now = Clock::now();
      if (e.kind == Event::Kind::kFinal) {
        // A constrained output may end early with `stop` when its grammar is complete.
        times.failed = e.finish_reason != FinishReason::kLength &&
                       !(constrained && e.finish_reason == FinishReason::kStop);
        break;
      }
      const double ms = std::chrono::duration<double, std::milli>(now - last).count();
      if (times.output_tokens == 0) {
        times.ttft_ms = ms;
      } else {
        times.itl_ms.push_back(ms);
        times.decode_ms += ms;
      }
      times.output_tokens += static_cast<int>(e.token_ids.size());
      for (std::int32_t id : e.token_ids)
        times.digest = (times.digest ^ static_cast<std::uint32_t>(id)) * 1099511628211ull;
      last = now;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench: request failed: %s\n", e.what());
    times.failed = true;
  }
  progress.tick();
}

}  // namespace

asio::awaitable<void> run_request(Engine& engine, GenerateRequest request, Clock::time_point at,
                                  RequestTimes& times, ProgressBar& progress) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  timer.expires_at(at);
  co_await timer.async_wait(asio::use_awaitable);
  times.input_tokens = static_cast<int>(request.prompt_ids.size());
  const bool constrained = request.response_format.constrained();
  const auto submitted = Clock::now();
  std::exception_ptr error;
  std::shared_ptr<RequestStream> stream;
  try {
    stream = co_await engine.submit(std::move(request), asio::use_awaitable);
  } catch (...) {
    error = std::current_exception();
  }
  co_await read_request(error, std::move(stream), constrained, submitted, times, progress);
}

asio::awaitable<void> submit_in_order(Engine& engine, std::vector<GenerateRequest>& requests,
                                      const std::vector<Clock::time_point>& arrivals,
                                      std::vector<RequestTimes>& times, ProgressBar& progress,
                                      std::vector<std::promise<void>>& finished) {
  auto executor = co_await asio::this_coro::executor;
  asio::steady_timer timer(executor);
  for (std::size_t k = 0; k < requests.size(); ++k) {
    if (arrivals[k] > Clock::now()) {
      timer.expires_at(arrivals[k]);
      co_await timer.async_wait(asio::use_awaitable);
    }
    times[k].input_tokens = static_cast<int>(requests[k].prompt_ids.size());
    const bool constrained = requests[k].response_format.constrained();
    const auto submitted = Clock::now();
    engine.submit(std::move(requests[k]),
                  [&, k, executor, constrained, submitted](std::exception_ptr error,
                                                           std::shared_ptr<RequestStream> stream) {
                    asio::co_spawn(executor,
                                   read_request(error, std::move(stream), constrained, submitted,
                                                times[k], progress),
                                   [&finished, k](std::exception_ptr) { finished[k].set_value(); });
                  });
  }
}

}  // namespace weft::cli
