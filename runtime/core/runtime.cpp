#include "weft/runtime.hpp"

#include <algorithm>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "weft/actor.hpp"
#include "weft/error.hpp"
#include "weft/log.hpp"

namespace weft {
namespace {

using WorkGuard = asio::executor_work_guard<asio::io_context::executor_type>;

// One io_context and the threads that run it.
struct ThreadGroup {
  ThreadGroup(std::string group_name, unsigned concurrency)
      : name(std::move(group_name)),
        context(static_cast<int>(concurrency)),
        work(asio::make_work_guard(context)) {}

  std::string name;
  asio::io_context context;
  std::optional<WorkGuard> work;  // keeps run() going while idle, until shutdown
  std::vector<std::thread> threads;
};

}  // namespace

struct Runtime::State {
  std::vector<std::unique_ptr<ThreadGroup>> groups;  // [0] is the worker pool
  unsigned worker_threads = 0;

  std::mutex mutex;
  std::condition_variable all_idle;
  std::size_t running_threads = 0;  // guarded by mutex
  std::vector<std::function<void()>> shutdown_callbacks;
  std::atomic<bool> stopping{false};
  bool finished = false;
  ShutdownReport report;

  // Call with `mutex` held; the thread takes it only when it exits.
  void start_thread(ThreadGroup& group) {
    ++running_threads;
    try {
      group.threads.emplace_back([this, &group] {
        // run() rethrows exceptions from raw handlers; record them and keep serving.
        for (;;) {
          try {
            group.context.run();
            break;
          } catch (...) {
            detail::report_unhandled_exception(std::current_exception(), "thread " + group.name);
          }
        }
        std::lock_guard lock(mutex);
        --running_threads;
        all_idle.notify_all();
      });
    } catch (...) {
      --running_threads;  // the thread never started
      throw;
    }
  }
};

Runtime::Runtime(RuntimeOptions options) : state_(std::make_unique<State>()) {
  unsigned n = options.worker_threads;
  if (n == 0) n = std::max(1u, std::thread::hardware_concurrency());
  state_->worker_threads = n;
  auto& pool = *state_->groups.emplace_back(std::make_unique<ThreadGroup>("worker", n));
  std::lock_guard lock(state_->mutex);
  for (unsigned i = 0; i < n; ++i)
    state_->start_thread(pool);
}

Runtime::~Runtime() {
  shutdown();
}

asio::any_io_executor Runtime::executor() const {
  return state_->groups.front()->context.get_executor();
}

unsigned Runtime::worker_threads() const noexcept {
  return state_->worker_threads;
}

bool Runtime::stopping() const noexcept {
  return state_->stopping.load();
}

asio::any_io_executor Runtime::make_dedicated_thread(std::string name) {
  std::lock_guard lock(state_->mutex);
  if (state_->stopping.load()) {
    throw Error(ErrorCode::kShutdown,
                "cannot start dedicated thread '" + name + "': the runtime is shutting down");
  }
  auto& group = *state_->groups.emplace_back(std::make_unique<ThreadGroup>(std::move(name), 1));
  state_->start_thread(group);
  return group.context.get_executor();
}

void Runtime::on_shutdown(std::function<void()> callback) {
  std::lock_guard lock(state_->mutex);
  state_->shutdown_callbacks.push_back(std::move(callback));
}

ShutdownReport Runtime::shutdown(std::chrono::milliseconds drain_timeout) {
  State& s = *state_;
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard lock(s.mutex);
    if (s.finished || s.stopping.load()) return s.report;
    s.stopping.store(true);
    callbacks.swap(s.shutdown_callbacks);
  }
  for (auto& callback : callbacks) {
    try {
      callback();
    } catch (...) {
      detail::report_unhandled_exception(std::current_exception(), "shutdown callback");
    }
  }
  // No new dedicated threads can appear now (stopping is set), so groups is stable.
  for (auto& group : s.groups)
    group->work.reset();

  std::unique_lock lock(s.mutex);
  bool drained = s.all_idle.wait_for(lock, drain_timeout, [&] { return s.running_threads == 0; });
  lock.unlock();
  if (!drained) {
    log_warn("runtime shutdown: work still pending after the drain deadline; cancelling it");
    for (auto& group : s.groups)
      group->context.stop();
  }
  std::size_t joined = 0;
  for (auto& group : s.groups) {
    for (auto& thread : group->threads) {
      if (thread.joinable()) {
        thread.join();
        ++joined;
      }
    }
  }
  lock.lock();
  s.finished = true;
  s.report = ShutdownReport{drained, joined};
  return s.report;
}

}  // namespace weft
