#include "kernels/cpu/thread_pool.hpp"

#include <algorithm>

#include "kernels/cpu/cpu_features.hpp"

namespace weft::cpu {

ThreadPool::ThreadPool(unsigned threads) {
  if (threads == 0) threads = std::max(1u, cpu_features().logical_cores);
  for (unsigned i = 1; i < threads; ++i)
    workers_.emplace_back([this, i] { work(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_)
    t.join();
}

void ThreadPool::parallel_for(std::size_t n,
                              const std::function<void(std::size_t, std::size_t)>& fn,
                              std::size_t grain) {
  if (n == 0) return;
  grain = std::max<std::size_t>(grain, 1);
  const auto parts = static_cast<unsigned>(std::min<std::size_t>(size(), (n + grain - 1) / grain));
  if (parts <= 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    job_parts_ = parts;
    pending_ = parts - 1;
    ++generation_;
  }
  wake_.notify_all();
  fn(0, n / parts);
  std::unique_lock lock(mutex_);
  done_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::work(unsigned index) {
  std::size_t seen = 0;
  for (;;) {
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (index >= job_parts_) continue;  // this job has fewer parts than threads
    const auto* fn = job_;
    const std::size_t n = job_n_;
    const unsigned parts = job_parts_;
    lock.unlock();
    (*fn)(n * index / parts, n * (index + 1) / parts);
    lock.lock();
    if (--pending_ == 0) done_.notify_one();
  }
}

}  // namespace weft::cpu
