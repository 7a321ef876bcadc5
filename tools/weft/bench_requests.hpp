#pragma once
// `weft bench`'s requests on their way through the engine: each one's timings, the progress
// bar, and the two ways of sending them (a closed loop of clients, or the open loop handing
// them over in order at their arrival times).

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "weft/engine.hpp"

namespace weft::cli {

struct RequestTimes {
  double ttft_ms = 0;
  double decode_ms = 0;  // first token to last
  std::vector<double> itl_ms;
  int output_tokens = 0;
  int input_tokens = 0;
  bool failed = false;
  std::uint64_t digest = 14695981039346656037ull;  // FNV-1a of the output token ids
};

class ProgressBar {
 public:
  explicit ProgressBar(int total) : total_(total), tty_(isatty(STDERR_FILENO) != 0) {}
  void tick() {
    const int done = ++done_;
    std::lock_guard lock(mutex_);
    const int percent = done * 100 / std::max(total_, 1);
    if (tty_) {
      const int width = 30;
      const int filled = done * width / std::max(total_, 1);
      std::fprintf(stderr, "\rbench [%s%s] %d/%d", std::string(filled, '#').c_str(),
                   std::string(width - filled, '.').c_str(), done, total_);
      if (done == total_) std::fputc('\n', stderr);
    } else if (percent >= next_ || done == total_) {
      std::fprintf(stderr, "bench: %d/%d requests done\n", done, total_);
      next_ = percent / 10 * 10 + 10;
    }
  }

 private:
  int total_;
  bool tty_;
  std::atomic<int> done_{0};
  std::mutex mutex_;
  int next_ = 10;
};

// Closed loop: one client's request, submitted at `at`, read to its end.
boost::asio::awaitable<void> run_request(Engine& engine, GenerateRequest request,
                                         std::chrono::steady_clock::time_point at,
                                         RequestTimes& times, ProgressBar& progress);

// Open loop (offline, or at a Poisson rate): one coroutine hands the requests to the engine in
// the file's order, each at its arrival time, and a reader per request follows its events;
// `finished[k]` is set when request k's reader is done. The submissions are initiated here one
// after another (Engine::submit posts an unconstrained request to the tokenizer's strand before
// it returns), so the scheduler queues them in this order; constrained requests are compiled on
// a pool first, which may reorder neighbours. A timer per request, all expiring at the same instant
// (offline), handed them over in the order Asio's timer heap released equal deadlines: mostly
// the file's reverse, which the scheduler's first-come-first-served queue then kept
// (docs/PERFORMANCE.md, "Why the longest-first file took 2,160 steps").
boost::asio::awaitable<void> submit_in_order(
    Engine& engine, std::vector<GenerateRequest>& requests,
    const std::vector<std::chrono::steady_clock::time_point>& arrivals,
    std::vector<RequestTimes>& times, ProgressBar& progress,
    std::vector<std::promise<void>>& finished);

}  // namespace weft::cli
