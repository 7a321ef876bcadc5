#include "actors/kv_allocator_actor.hpp"

namespace weft::actors {

KvAllocatorActor::KvAllocatorActor(const asio::any_io_executor& executor, int num_pages,
                                   int page_size)
    : Actor(executor), pool_(num_pages, page_size) {}

KvPoolStats KvAllocatorActor::stats_now() const {
  KvPoolStats s;
  s.page_size = pool_.page_size();
  s.total_pages = pool_.num_pages();
  s.free_pages = pool_.free_pages();
  s.used_pages = pool_.used_pages();
  s.evictable_pages = pool_.evictable_pages();
  s.peak_used_pages = pool_.peak_used_pages();
  return s;
}

}  // namespace weft::actors
