#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <future>
#include <thread>

#include "tests/runtime/test_actors.hpp"
#include "weft/runtime.hpp"

namespace weft {
namespace {

using testing::Counter;
using testing::Meeter;
using testing::Note;
using testing::Recorder;
using testing::Rendezvous;

TEST(Actor, PreservesPerSenderOrderUnderConcurrentSenders) {
  Runtime runtime(RuntimeOptions{.worker_threads = 4});
  Recorder recorder(runtime.executor());
  constexpr int kSenders = 6;
  constexpr int kPerSender = 5000;

  std::vector<std::thread> senders;
  for (int s = 0; s < kSenders; ++s) {
    senders.emplace_back([&recorder, s] {
      for (int i = 0; i < kPerSender; ++i) {
        recorder.deliver(Note{s, i, std::make_unique<int>(i)});
      }
    });
  }
  for (auto& t : senders)
    t.join();

  auto seen = recorder.received(asio::use_future).get();
  ASSERT_EQ(seen.size(), static_cast<std::size_t>(kSenders * kPerSender));
  std::vector<int> next(kSenders, 0);
  for (const auto& note : seen) {
    ASSERT_EQ(note.sequence, next[note.sender]) << "sender " << note.sender << " out of order";
    ++next[note.sender];
  }
  EXPECT_FALSE(recorder.overlapped()) << "two handlers of one actor ran at the same time";
  EXPECT_FALSE(recorder.payload_mismatch());
}

TEST(Actor, TwoActorsRunInParallel) {
  Runtime runtime(RuntimeOptions{.worker_threads = 2});
  Rendezvous rendezvous(2);
  Meeter a(runtime.executor(), rendezvous);
  Meeter b(runtime.executor(), rendezvous);
  // Each handler blocks until the other one has started: both return true only if the two
  // actors' handlers were running at the same moment on different threads.
  auto fa = a.meet(asio::use_future);
  auto fb = b.meet(asio::use_future);
  EXPECT_TRUE(fa.get());
  EXPECT_TRUE(fb.get());
}

TEST(Actor, ReplyThroughCallback) {
  Runtime runtime(RuntimeOptions{.worker_threads = 2});
  Counter counter(runtime.executor());
  counter.add(40);
  counter.add(2);
  std::promise<int> result;
  counter.total([&result](std::exception_ptr error, int total) {
    if (error) {
      result.set_exception(error);
    } else {
      result.set_value(total);
    }
  });
  EXPECT_EQ(result.get_future().get(), 42);
}

TEST(Actor, ReplyThroughFuture) {
  Runtime runtime(RuntimeOptions{.worker_threads = 2});
  Counter counter(runtime.executor());
  for (int i = 1; i <= 100; ++i)
    counter.add(i);
  EXPECT_EQ(counter.total(asio::use_future).get(), 5050);
  counter.reset(asio::use_future).get();
  EXPECT_EQ(counter.total(asio::use_future).get(), 0);
}

TEST(Actor, ReplyAwaitedFromCoroutine) {
  Runtime runtime(RuntimeOptions{.worker_threads = 2});
  Counter counter(runtime.executor());
  auto done = asio::co_spawn(
      runtime.executor(),
      [&counter]() -> asio::awaitable<int> {
        counter.add(5);
        int first = co_await counter.total(asio::use_awaitable);
        int second =
            co_await counter.slow_add(7, std::chrono::milliseconds(1), asio::use_awaitable);
        co_await counter.reset(asio::use_awaitable);
        int third = co_await counter.total(asio::use_awaitable);
        co_return first * 10000 + second * 100 + third;
      },
      asio::use_future);
  EXPECT_EQ(done.get(), 5 * 10000 + 12 * 100 + 0);
}

TEST(Actor, ExceptionBecomesErrorReplyForFuture) {
  Runtime runtime(RuntimeOptions{.worker_threads = 2});
  Counter counter(runtime.executor());
  auto reply = counter.fail(asio::use_future);
  try {
    reply.get();
    FAIL() << "the error reply was lost";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "counter: refused on purpose");
  }
  // The actor keeps serving after the failed request.
  counter.add(3);
  EXPECT_EQ(counter.total(asio::use_future).get(), 3);
}

TEST(Actor, ExceptionBecomesErrorReplyForCallbackAndCoroutine) {
  Runtime runtime(RuntimeOptions{.worker_threads = 2});
  Counter counter(runtime.executor());
  std::promise<std::exception_ptr> seen;
  counter.fail([&seen](std::exception_ptr error, int) { seen.set_value(error); });
  EXPECT_NE(seen.get_future().get(), nullptr);

  auto caught = asio::co_spawn(
      runtime.executor(),
      [&counter]() -> asio::awaitable<bool> {
        try {
          co_await counter.fail(asio::use_awaitable);
        } catch (const Error& e) {
          co_return e.code() == ErrorCode::kInvalidArgument;
        }
        co_return false;
      },
      asio::use_future);
  EXPECT_TRUE(caught.get());
}

TEST(Actor, ExceptionInFireAndForgetMessageDoesNotKillTheProcess) {
  Runtime runtime(RuntimeOptions{.worker_threads = 2});
  Counter counter(runtime.executor());
  std::size_t before = unhandled_handler_exceptions();
  counter.add(1);
  counter.explode();
  counter.add(1);
  EXPECT_EQ(counter.total(asio::use_future).get(), 2);
  EXPECT_EQ(unhandled_handler_exceptions(), before + 1);
}

TEST(Actor, RawHandlerExceptionDoesNotStopTheWorkerThread) {
  Runtime runtime(RuntimeOptions{.worker_threads = 1});
  std::size_t before = unhandled_handler_exceptions();
  asio::post(runtime.executor(), [] { throw std::runtime_error("raw handler exploded"); });
  Counter counter(runtime.executor());
  counter.add(9);
  EXPECT_EQ(counter.total(asio::use_future).get(), 9);
  EXPECT_EQ(unhandled_handler_exceptions(), before + 1);
}

TEST(Actor, ActorOnDedicatedThreadDoesNotBlockWorkers) {
  Runtime runtime(RuntimeOptions{.worker_threads = 1});
  Counter device(runtime.make_dedicated_thread("device-0"));
  Counter worker(runtime.executor());
  // The dedicated actor blocks until the worker-pool actor has replied. Were both on one
  // thread, the worker's reply could not come first and the gate would time out.
  std::promise<void> gate;
  auto opened = gate.get_future();
  auto blocked = device.call(
      [&opened] { return opened.wait_for(std::chrono::seconds(10)) == std::future_status::ready; },
      asio::use_future);
  worker.add(4);
  EXPECT_EQ(worker.total(asio::use_future).get(), 4);
  gate.set_value();
  EXPECT_TRUE(blocked.get());
}

}  // namespace
}  // namespace weft
