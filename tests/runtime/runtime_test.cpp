#include "weft/runtime.hpp"

#include <gtest/gtest.h>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_future.hpp>
#include <future>

#include "tests/runtime/test_actors.hpp"

namespace weft {
namespace {

using testing::Counter;

// An actor with a long timer: it ends its wait when the runtime starts shutting down.
class Ticker : public Actor {
 public:
  explicit Ticker(Runtime& runtime) : Actor(runtime.executor()), timer_(strand()) {
    runtime.on_shutdown([this] { post([this] { timer_.cancel(); }); });
  }

  void start() {
    post([this] {
      timer_.expires_after(std::chrono::hours(1));
      timer_.async_wait([this](boost::system::error_code ec) {
        cancelled_.store(ec == asio::error::operation_aborted);
      });
    });
  }

  bool cancelled() const { return cancelled_.load(); }

 private:
  asio::steady_timer timer_;
  std::atomic<bool> cancelled_{false};
};

TEST(Runtime, ShutdownFinishesPendingWork) {
  Runtime runtime(RuntimeOptions{.worker_threads = 1});
  Counter counter(runtime.executor());
  std::atomic<int> done{0};
  auto strand = asio::make_strand(runtime.executor());
  for (int i = 0; i < 200; ++i) {
    asio::post(strand, [&done] {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      done.fetch_add(1);
    });
  }
  auto reply = counter.slow_add(5, std::chrono::milliseconds(20), asio::use_future);
  ShutdownReport report = runtime.shutdown(std::chrono::seconds(60));
  EXPECT_TRUE(report.drained);
  EXPECT_EQ(report.threads_joined, 1u);
  EXPECT_EQ(done.load(), 200);
  EXPECT_EQ(reply.get(), 5) << "a request in flight at shutdown must be answered";
}

TEST(Runtime, ShutdownCancelsWorkLeftPastTheDeadline) {
  auto runtime = std::make_unique<Runtime>(RuntimeOptions{.worker_threads = 1});
  auto counter = std::make_unique<Counter>(runtime->executor());
  std::promise<void> release;
  auto released = release.get_future().share();
  std::promise<void> started;
  // The first request holds the only thread until the test releases it; the second waits
  // behind it on the same strand.
  auto in_flight = counter->call(
      [released, &started] {
        started.set_value();
        return released.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
      },
      asio::use_future);
  auto queued = counter->total(asio::use_future);
  started.get_future().wait();  // shut down only once the first request is really in flight

  std::thread releaser([&release] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    release.set_value();
  });
  ShutdownReport report = runtime->shutdown(std::chrono::milliseconds(1));
  releaser.join();
  EXPECT_FALSE(report.drained);
  EXPECT_EQ(report.threads_joined, 1u);
  EXPECT_TRUE(in_flight.get()) << "the handler already running finishes";

  counter.reset();
  runtime.reset();  // destroys the cancelled handlers
  try {
    queued.get();
    FAIL() << "the queued request should have been cancelled";
  } catch (const std::future_error& e) {
    EXPECT_EQ(e.code(), std::future_errc::broken_promise);
  }
}

TEST(Runtime, ShutdownCallbacksLetLongTimersEndAtOnce) {
  Runtime runtime(RuntimeOptions{.worker_threads = 2});
  Ticker ticker(runtime);
  ticker.start();
  // Make sure the timer is armed before shutting down.
  Counter probe(runtime.executor());
  probe.total(asio::use_future).get();
  ShutdownReport report = runtime.shutdown(std::chrono::seconds(30));
  EXPECT_TRUE(report.drained) << "an hour-long timer kept the runtime from draining";
  EXPECT_TRUE(ticker.cancelled());
}

TEST(Runtime, JoinsDedicatedThreadsAndRefusesNewOnesAfterShutdown) {
  Runtime runtime(RuntimeOptions{.worker_threads = 2});
  Counter device(runtime.make_dedicated_thread("device-0"));
  Counter other_device(runtime.make_dedicated_thread("device-1"));
  device.add(1);
  other_device.add(2);
  EXPECT_EQ(device.total(asio::use_future).get(), 1);
  ShutdownReport report = runtime.shutdown();
  EXPECT_TRUE(report.drained);
  EXPECT_EQ(report.threads_joined, 4u);
  EXPECT_TRUE(runtime.stopping());
  try {
    runtime.make_dedicated_thread("device-2");
    FAIL() << "a dedicated thread was started after shutdown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kShutdown);
  }
  // A second shutdown is a no-op that returns the first report.
  ShutdownReport again = runtime.shutdown();
  EXPECT_EQ(again.threads_joined, 4u);
}

TEST(Runtime, DefaultWorkerCountIsOnePerCore) {
  Runtime runtime;
  EXPECT_GE(runtime.worker_threads(), 1u);
}

}  // namespace
}  // namespace weft
