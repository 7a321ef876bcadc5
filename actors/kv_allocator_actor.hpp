#pragma once
// The KV allocator: owns the device's PagePool (runtime/kv) and answers questions about it.
// It lives on the scheduler actor's strand (Actor(const Strand&)): every allocation happens
// while the scheduler plans a step, so the scheduler borrows the pool by reference and calls
// it directly, with no message round trip on the step loop; other actors and the Engine use
// the messages below, which run on the same strand and so never see a half-planned step.

#include <utility>

#include "runtime/kv/page_pool.hpp"
#include "weft/actor.hpp"

namespace weft::actors {

// One consistent look at the pool.
struct KvPoolStats {
  int page_size = 0;  // tokens per page
  int total_pages = 0;
  int free_pages = 0;
  int used_pages = 0;
  int evictable_pages = 0;  // used only by the prefix cache: free on demand
  int peak_used_pages = 0;  // since start, or since the last reset_peak
};

class KvAllocatorActor : public Actor {
 public:
  // A pool of `num_pages` pages of `page_size` tokens on a strand of its own; the scheduler
  // actor then joins that strand (SchedulerActor's constructor).
  KvAllocatorActor(const asio::any_io_executor& executor, int num_pages, int page_size);

  // The pool, lent to the scheduler on this strand. Touch it only from a handler running on
  // strand(); anyone else asks through the messages.
  kv::PagePool& pool() noexcept { return pool_; }

  // Replies with the pool's counts.
  template <class Token>
  auto stats(Token&& token) {
    return ask([this] { return stats_now(); }, std::forward<Token>(token));
  }

  // Restarts the high-water mark from the pages in use now (a benchmark's measured phase);
  // replies with the stats just before the reset.
  template <class Token>
  auto reset_peak(Token&& token) {
    return ask(
        [this] {
          KvPoolStats before = stats_now();
          pool_.reset_peak();
          return before;
        },
        std::forward<Token>(token));
  }

 private:
  KvPoolStats stats_now() const;

  kv::PagePool pool_;  // touched only on strand()
};

}  // namespace weft::actors
