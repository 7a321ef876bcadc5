// Embedding Weft in an event-driven Asio service: the engine runs on the service's own
// io_context; a timer-driven workload starts requests from coroutines, their text streams as
// it is generated, and one request is cancelled mid-stream.
//
//   build/release/bin/embed_service [MODEL_DIR]        (default: models/weft-tiny)

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <iostream>
#include <mutex>
#include <thread>

#include "weft/engine.hpp"

namespace asio = boost::asio;

namespace {

std::mutex print_mutex;

void say(int n, const std::string& what) {
  std::lock_guard lock(print_mutex);
  std::cout << "[request " << n << "] " << what << std::endl;
}

// One client request: submit, stream, and (for the one marked) cancel after a few tokens.
asio::awaitable<void> client(weft::Engine& engine, int n, std::string prompt, bool cancel_early) {
  weft::GenerateRequest request;
  request.prompt = prompt;
  request.sampling.max_tokens = 40;
  request.sampling.temperature = 0.8f;
  request.sampling.seed = static_cast<std::uint64_t>(n);
  auto stream = co_await engine.submit(std::move(request), asio::use_awaitable);
  say(n, "submitted \"" + prompt + "\" as id " + std::to_string(stream->id()));
  std::string text;
  int deltas = 0;
  for (;;) {
    weft::Event event = co_await stream->next(asio::use_awaitable);
    if (event.kind == weft::Event::Kind::kFinal) {
      say(n, "done (" + std::string(weft::to_string(event.finish_reason)) + ", " +
                 std::to_string(event.usage.completion_tokens) + " tokens): " + prompt + text);
      co_return;
    }
    text += event.text;
    if (!event.text.empty()) say(n, "+ \"" + event.text + "\"");
    if (cancel_early && ++deltas == 5) {
      say(n, "cancelling mid-stream");
      engine.cancel(stream->id());
    }
  }
}

// The workload: a timer starts a new request every 50 ms, then the service shuts down.
asio::awaitable<void> workload(weft::Engine& engine, asio::io_context& io) {
  const char* prompts[] = {"Call me Ishmael.", "Fellow-Citizens of the Senate", "The whale",
                           "In the year of our Lord"};
  asio::steady_timer timer(co_await asio::this_coro::executor);
  std::atomic<int> running{4};  // clients finish on either of the service's threads
  for (int n = 0; n < 4; ++n) {
    asio::co_spawn(io, client(engine, n + 1, prompts[n], /*cancel_early=*/n == 2),
                   [&running](std::exception_ptr e) {
                     if (e) {
                       try {
                         std::rethrow_exception(e);
                       } catch (const std::exception& ex) {
                         std::cerr << "request failed: " << ex.what() << '\n';
                       }
                     }
                     --running;
                   });
    timer.expires_after(std::chrono::milliseconds(50));
    co_await timer.async_wait(asio::use_awaitable);
  }
  while (running.load() > 0) {  // wait for the clients, polling on the timer
    timer.expires_after(std::chrono::milliseconds(20));
    co_await timer.async_wait(asio::use_awaitable);
  }
  weft::EngineMetrics m = co_await engine.metrics(asio::use_awaitable);
  std::cout << "metrics: " << m.steps << " steps, " << m.generated_tokens << " tokens generated, "
            << m.finished_length << " finished by length, " << m.finished_stop << " by stop, "
            << m.finished_cancelled << " cancelled, KV pages in use " << m.kv_pages_used << "/"
            << m.kv_pages_total << std::endl;
  co_await engine.shutdown(asio::use_awaitable);
  std::cout << "engine shut down" << std::endl;
}

}  // namespace

int main(int argc, char** argv) {
  asio::io_context io;
  weft::EngineConfig config;
  config.model_dir = argc > 1 ? argv[1] : WEFT_DEFAULT_MODEL_DIR;
  config.kv_budget_bytes = 64ll << 20;
  try {
    weft::Engine engine(io.get_executor(), config);
    std::atomic<bool> ok{true};
    asio::co_spawn(io, workload(engine, io), [&ok](std::exception_ptr e) {
      if (e) ok = false;
    });
    std::thread helper([&io] { io.run(); });  // the service's two threads
    io.run();
    helper.join();
    return ok ? 0 : 1;
  } catch (const weft::Error& e) {
    std::cerr << "embed_service: " << e.what() << '\n';
    return 1;
  }
}
