#pragma once
// A fixed set of worker threads for data-parallel kernels. parallel_for splits [0, n) into one
// contiguous range per thread (the caller's thread takes the first), runs them and waits:
// a forward pass is a sequence of such barriers, so nothing fancier pays on the CPU path.

#include <condition_variable>
#include <cstddef>
#include <functional>
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
  void work(unsigned index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(std::size_t, std::size_t)>* job_ = nullptr;
  std::size_t job_n_ = 0;
  unsigned job_parts_ = 0;
  unsigned pending_ = 0;
  std::size_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace weft::cpu
