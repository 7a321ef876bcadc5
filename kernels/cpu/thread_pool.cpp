#include "kernels/cpu/thread_pool.hpp"

#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/cpu_features.hpp"

namespace weft::cpu {
namespace {

// About 20-50 microseconds of pause instructions: long enough to catch the next barrier of a
// decode step, short enough not to hold a shared core for long.
constexpr int kSpinIterations = 4000;

template <class Done>
bool spin_until(Done done) {
  for (int i = 0; i < kSpinIterations; ++i) {
    if (done()) return true;
    _mm_pause();
  }
  return done();
}

}  // namespace

ThreadPool::ThreadPool(unsigned threads) {
  if (threads == 0) threads = std::max(1u, cpu_features().logical_cores);
  for (unsigned i = 1; i < threads; ++i)
    workers_.emplace_back([this] { work(); });
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

void ThreadPool::run_chunks(Job& job) {
  for (;;) {
    const std::size_t c = job.next.fetch_add(1, std::memory_order_relaxed);
    if (c >= job.chunks) return;
    const std::size_t begin = c * job.chunk;
    (*job.fn)(begin, std::min(job.n, begin + job.chunk));
    job.done.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(std::size_t n,
                              const std::function<void(std::size_t, std::size_t)>& fn,
                              std::size_t grain) {
  if (n == 0) return;
  grain = std::max<std::size_t>(grain, 1);
  const std::size_t parts = std::min<std::size_t>(size(), (n + grain - 1) / grain);
  if (parts <= 1) {
    fn(0, n);
    return;
  }
  // A few chunks per thread, so a late thread's share is picked up by the others.
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->n = n;
  job->chunk = std::max(grain, (n + 4 * parts - 1) / (4 * parts));
  job->chunks = (n + job->chunk - 1) / job->chunk;
  {
    std::lock_guard lock(mutex_);
    job_ = job;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  run_chunks(*job);
  // Chunks still running belong to workers that claimed them; wait for those only.
  while (!spin_until([&] { return job->done.load(std::memory_order_acquire) == job->chunks; })) {
    std::this_thread::yield();
  }
}

void ThreadPool::work() {
  std::size_t seen = 0;
  for (;;) {
    spin_until([&] { return generation_.load(std::memory_order_acquire) != seen || stop_.load(); });
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
      if (stop_) return;
      seen = generation_.load();
      job = job_;
    }
    if (job) run_chunks(*job);
  }
}

}  // namespace weft::cpu
