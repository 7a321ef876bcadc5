#pragma once
// A fixed set of worker threads for data-parallel kernels. parallel_for cuts [0, n) into
// chunks that the caller and the workers claim from a shared counter, so a worker the OS has
// not scheduled yet costs nothing: the caller simply takes its chunks. (On a busy machine a
// static split makes every barrier wait for the slowest thread to be woken.)

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace weft::cpu {

class ThreadPool {
 public:
  // threads == 0: one per logical core.
  explicit ThreadPool(unsigned threads = 0);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

  unsigned size() const noexcept { return static_cast<unsigned>(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint ranges covering [0, n); returns when all are done.
  // Ranges are at least `grain` long so tiny loops do not pay for waking threads.
  void parallel_for(std::size_t n, const std::function<void(std::size_t, std::size_t)>& fn,
                    std::size_t grain = 1);

 private:
  // One parallel_for call. Workers hold it by shared_ptr, so one that wakes after the call
  // has returned finds no chunk left and never touches the caller's (gone) function.
  struct Job {
    const std::function<void(std::size_t, std::size_t)>* fn = nullptr;
    std::size_t n = 0;
    std::size_t chunk = 1;
    std::size_t chunks = 0;
    std::atomic<std::size_t> next{0};
    std::atomic<std::size_t> done{0};
  };
  static void run_chunks(Job& job);
  void work();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::shared_ptr<Job> job_;
  std::atomic<std::size_t> generation_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace weft::cpu
