#pragma once
// Small actors used by the runtime tests: each is a plain piece of state plus a strand.

#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "weft/actor.hpp"
#include "weft/error.hpp"

namespace weft::testing {

// A message moved by value; the payload is move-only to prove nothing is copied or shared.
struct Note {
  int sender = 0;
  int sequence = 0;
  std::unique_ptr<int> payload;
};

// Records every note it receives and checks that no two of its handlers ever overlap.
class Recorder : public Actor {
 public:
  using Actor::Actor;

  void deliver(Note note) {
    post([this, note = std::move(note)]() mutable {
      if (inside_.exchange(true)) overlapped_.store(true);
      received_.push_back({note.sender, note.sequence});
      if (note.payload && *note.payload != note.sequence) payload_mismatch_ = true;
      inside_.store(false);
    });
  }

  struct Seen {
    int sender;
    int sequence;
  };

  template <class Token>
  auto received(Token&& token) {
    return ask([this] { return received_; }, std::forward<Token>(token));
  }

  bool overlapped() const { return overlapped_.load(); }
  bool payload_mismatch() const { return payload_mismatch_; }

 private:
  std::vector<Seen> received_;
  std::atomic<bool> inside_{false};
  std::atomic<bool> overlapped_{false};
  bool payload_mismatch_ = false;
};

class Counter : public Actor {
 public:
  using Actor::Actor;

  void add(int n) {
    post([this, n] { total_ += n; });
  }

  template <class Token>
  auto total(Token&& token) {
    return ask([this] { return total_; }, std::forward<Token>(token));
  }

  // A request whose handler throws: the caller must see the error, the process must live.
  template <class Token>
  auto fail(Token&& token) {
    return ask(
        []() -> int { throw Error(ErrorCode::kInvalidArgument, "counter: refused on purpose"); },
        std::forward<Token>(token));
  }

  // A fire-and-forget message whose handler throws.
  void explode() {
    post([] { throw std::runtime_error("counter: message exploded"); });
  }

  // A request with no reply value.
  template <class Token>
  auto reset(Token&& token) {
    return ask([this] { total_ = 0; }, std::forward<Token>(token));
  }

  // Runs `fn` on the strand and replies with its result.
  template <class Fn, class Token>
  auto call(Fn fn, Token&& token) {
    return ask(std::move(fn), std::forward<Token>(token));
  }

  // Blocks the strand for `duration`, then replies.
  template <class Token>
  auto slow_add(int n, std::chrono::milliseconds duration, Token&& token) {
    return ask(
        [this, n, duration] {
          std::this_thread::sleep_for(duration);
          total_ += n;
          return total_;
        },
        std::forward<Token>(token));
  }

 private:
  int total_ = 0;
};

// Two handlers that both wait here succeed only if they run at the same time.
class Rendezvous {
 public:
  explicit Rendezvous(int parties) : parties_(parties) {}

  // Returns false when the other parties did not arrive within `timeout`.
  bool arrive_and_wait(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    ++arrived_;
    cv_.notify_all();
    return cv_.wait_for(lock, timeout, [&] { return arrived_ >= parties_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int parties_;
  int arrived_ = 0;
};

class Meeter : public Actor {
 public:
  Meeter(const asio::any_io_executor& executor, Rendezvous& rendezvous)
      : Actor(executor), rendezvous_(rendezvous) {}

  template <class Token>
  auto meet(Token&& token) {
    return ask([this] { return rendezvous_.arrive_and_wait(std::chrono::seconds(10)); },
               std::forward<Token>(token));
  }

 private:
  Rendezvous& rendezvous_;
};

}  // namespace weft::testing
