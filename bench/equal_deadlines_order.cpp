// The order in which N coroutines waiting on timers with one and the same deadline resume on a
// two-thread pool: what `weft bench` handed offline requests to the engine in before it
// submitted them from one coroutine (docs/PERFORMANCE.md, "Why the longest-first file took
// 2,160 steps"). Asio's timer heap releases equal deadlines in heap order, not the order they
// were set: mostly reversed.
//
//   build/release/bin/equal_deadlines_order [N]     the first 16 indices, and how far from order

#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace asio = boost::asio;

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::max(2, std::atoi(argv[1])) : 1000;
  asio::thread_pool pool(2);
  std::mutex mutex;
  std::vector<int> order;
  const auto at = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  std::vector<std::future<void>> done;
  for (int i = 0; i < n; ++i) {
    done.push_back(asio::co_spawn(
        pool.get_executor(),
        [&, i]() -> asio::awaitable<void> {
          asio::steady_timer timer(co_await asio::this_coro::executor);
          timer.expires_at(at);
          co_await timer.async_wait(asio::use_awaitable);
          std::lock_guard lock(mutex);
          order.push_back(i);
        },
        asio::use_future));
  }
  for (auto& f : done)
    f.get();
  int descents = 0;
  for (int k = 1; k < n; ++k)
    descents += order[static_cast<std::size_t>(k)] < order[static_cast<std::size_t>(k - 1)];
  std::printf("%d timers with one deadline resumed as:", n);
  for (int k = 0; k < std::min(n, 16); ++k)
    std::printf(" %d", order[static_cast<std::size_t>(k)]);
  std::printf(" ...\n%d of %d neighbours in descending order (0 for first come, first served)\n",
              descents, n - 1);
  return 0;
}
