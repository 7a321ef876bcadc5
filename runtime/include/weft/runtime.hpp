#pragma once
// The Runtime owns the threads every actor runs on: a pool of worker threads sharing one
// io_context, and dedicated threads (each with an io_context of its own) for work that
// blocks, such as a device executor's forward pass. An embedding application may instead run
// actors on its own executor; the Runtime is what the `weft` command and tests use.

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace weft {

struct RuntimeOptions {
  // Worker threads sharing the main io_context; 0 means one per logical core.
  unsigned worker_threads = 0;
};

struct ShutdownReport {
  bool drained = false;  // all posted work finished before the deadline
  std::size_t threads_joined = 0;
};

class Runtime {
 public:
  explicit Runtime(RuntimeOptions options = {});
  // Shuts down (as shutdown() with its default deadline) if that was not done yet.
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // The worker pool's executor: actors make their strands on it.
  boost::asio::any_io_executor executor() const;

  // Starts a thread with an io_context of its own and returns its executor. Work posted there
  // never waits behind the worker pool, and may block without stalling other actors.
  // Throws weft::Error (kShutdown) once shutdown has begun.
  boost::asio::any_io_executor make_dedicated_thread(std::string name);

  unsigned worker_threads() const noexcept;

  // Registers a callback run at the start of shutdown(): an actor cancels its timers and
  // stops accepting work there so that draining ends quickly. Runs on the thread that called
  // shutdown(); exceptions are logged and counted, never propagated.
  void on_shutdown(std::function<void()> callback);

  // Orderly shutdown: runs the on_shutdown callbacks, lets every thread finish the work
  // already posted (in-flight requests complete), and waits up to `drain_timeout` for that.
  // Past the deadline the io_contexts are stopped: work still queued is cancelled (its
  // handlers are destroyed with the Runtime, so a std::future waiting on it reports
  // broken_promise). Joins every thread. Idempotent; must not be called from a thread the
  // Runtime owns.
  ShutdownReport shutdown(std::chrono::milliseconds drain_timeout = std::chrono::seconds(10));

  bool stopping() const noexcept;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace weft
