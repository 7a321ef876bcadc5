// The KV allocator actor: its pool is lent to an actor on the same strand (as the scheduler
// actor borrows it), while other threads ask for its stats.

#include "actors/kv_allocator_actor.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/use_future.hpp>
#include <future>
#include <thread>
#include <vector>

#include "weft/runtime.hpp"

namespace weft::actors {
namespace {

namespace asio = boost::asio;

constexpr int kPagesPerMessage = 4;
constexpr int kMessagesPerCycle = 10;  // allocate 4 pages nine times, then release them all

// Stands in for the scheduler actor: on the allocator's strand, it uses the pool directly.
class PoolUser : public Actor {
 public:
  explicit PoolUser(KvAllocatorActor& kv) : Actor(kv.strand()), pool_(kv.pool()) {}

  void step() {
    post([this] {
      if (held_.size() < (kMessagesPerCycle - 1) * kPagesPerMessage) {
        if (!pool_.allocate(kPagesPerMessage, held_)) throw std::runtime_error("pool ran dry");
      } else {
        pool_.release_all(held_);
        held_.clear();
      }
    });
  }

 private:
  kv::PagePool& pool_;
  std::vector<std::int32_t> held_;
};

TEST(KvAllocatorActorTest, StatsAreConsistentWhileAnotherActorOnItsStrandAllocates) {
  Runtime runtime(RuntimeOptions{.worker_threads = 4});
  KvAllocatorActor kv(runtime.executor(), 64, 16);
  PoolUser user(kv);
  const std::size_t exceptions_before = unhandled_handler_exceptions();
  EXPECT_TRUE(user.strand() == kv.strand()) << "the two actors share one strand";

  constexpr int kCycles = 200;
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 0; i < kCycles * kMessagesPerCycle; ++i)
      user.step();
    done = true;
  });
  // Readers on other threads: every snapshot is taken between two of the user's handlers, so it
  // always sees whole messages (a multiple of 4 pages) and exact counts.
  auto read = [&kv, &done] {
    int snapshots = 0;
    int bad = 0;
    while (!done.load() || snapshots < 200) {
      KvPoolStats s = kv.stats(asio::use_future).get();
      ++snapshots;
      if (s.page_size != 16 || s.total_pages != 64 || s.free_pages + s.used_pages != 64 ||
          s.used_pages % kPagesPerMessage != 0 ||
          s.used_pages > (kMessagesPerCycle - 1) * kPagesPerMessage ||
          s.peak_used_pages < s.used_pages) {
        ++bad;
      }
    }
    return bad;
  };
  std::vector<std::future<int>> readers;
  for (int r = 0; r < 3; ++r)
    readers.push_back(std::async(std::launch::async, read));
  // A callback reader too: the reply runs on the worker pool, never on the strand.
  std::promise<KvPoolStats> via_callback;
  kv.stats([&](std::exception_ptr e, KvPoolStats s) {
    if (e)
      via_callback.set_exception(e);
    else
      via_callback.set_value(s);
  });
  EXPECT_EQ(via_callback.get_future().get().total_pages, 64);
  writer.join();
  for (auto& r : readers)
    EXPECT_EQ(r.get(), 0) << "a snapshot saw a torn or impossible state";

  // The strand runs messages in order: asked after the last step, the reply sees them all.
  KvPoolStats end = kv.reset_peak(asio::use_future).get();
  EXPECT_EQ(end.used_pages, 0) << "every cycle ends with its pages released";
  EXPECT_EQ(end.free_pages, 64);
  EXPECT_EQ(end.peak_used_pages, (kMessagesPerCycle - 1) * kPagesPerMessage);
  EXPECT_EQ(kv.stats(asio::use_future).get().peak_used_pages, 0) << "the peak was reset";
  runtime.shutdown();
  EXPECT_EQ(unhandled_handler_exceptions(), exceptions_before) << "the pool ran dry";
}

}  // namespace
}  // namespace weft::actors
