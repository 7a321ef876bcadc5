// A three-stage pipeline of actors on a weft::Runtime, the shape the engine takes:
// a producer stage splits lines into words, a counting stage keeps per-word counts, and a
// coroutine driven by a timer asks the counter for its top words while words still flow.
//
//   build/release/bin/actor_pipeline

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "weft/actor.hpp"
#include "weft/runtime.hpp"

namespace {

namespace asio = boost::asio;

struct Words {  // a message: moved by value, no behaviour
  std::vector<std::string> words;
};

class WordCounter : public weft::Actor {
 public:
  using Actor::Actor;

  void count(Words message) {
    post([this, message = std::move(message)] {
      for (const auto& w : message.words)
        ++counts_[w];
    });
  }

  template <class Token>
  auto top(std::size_t k, Token&& token) {
    return ask(
        [this, k] {
          std::vector<std::pair<std::string, int>> all(counts_.begin(), counts_.end());
          std::sort(all.begin(), all.end(),
                    [](const auto& a, const auto& b) { return a.second > b.second; });
          all.resize(std::min(k, all.size()));
          return all;
        },
        std::forward<Token>(token));
  }

 private:
  std::map<std::string, int> counts_;  // touched only on this actor's strand
};

class Splitter : public weft::Actor {
 public:
  Splitter(const asio::any_io_executor& executor, WordCounter& next)
      : Actor(executor), next_(next) {}

  void feed(std::string line) {
    post([this, line = std::move(line)] {
      Words message;
      std::istringstream in(line);
      for (std::string w; in >> w;)
        message.words.push_back(w);
      next_.count(std::move(message));
    });
  }

 private:
  WordCounter& next_;
};

}  // namespace

int main() {
  weft::Runtime runtime(weft::RuntimeOptions{.worker_threads = 2});
  WordCounter counter(runtime.executor());
  Splitter splitter(runtime.executor(), counter);

  const std::vector<std::string> text = {
      "call me ishmael some years ago never mind how long precisely",
      "having little or no money in my purse and nothing particular to interest me on shore",
      "i thought i would sail about a little and see the watery part of the world",
  };

  auto report = asio::co_spawn(
      runtime.executor(),
      [&]() -> asio::awaitable<void> {
        asio::steady_timer timer(co_await asio::this_coro::executor);
        for (int round = 1; round <= 3; ++round) {
          for (const auto& line : text)
            splitter.feed(line);
          timer.expires_after(std::chrono::milliseconds(20));
          co_await timer.async_wait(asio::use_awaitable);
          auto top = co_await counter.top(3, asio::use_awaitable);
          std::cout << "after round " << round << ":";
          for (const auto& [word, n] : top)
            std::cout << ' ' << word << '=' << n;
          std::cout << '\n';
        }
      },
      asio::use_future);
  report.get();
  auto result = runtime.shutdown();
  std::cout << "shutdown: drained=" << (result.drained ? "yes" : "no")
            << ", threads joined=" << result.threads_joined << '\n';
  return result.drained ? 0 : 1;
}
