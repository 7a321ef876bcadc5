#pragma once
// The KV pages of one device, counted exactly. A page holds `page_size` tokens of K and V for
// every layer and KV head (the storage lives with the executor; this class only hands out
// page ids). Pages are reference-counted so sequences can share a prompt's pages.
//
// A page may also be marked cached: the prefix cache (prefix_cache.hpp) holds one reference
// on it. A cached page whose only reference is the cache's is evictable, and
// evictable_pages() counts those exactly (kept up to date by retain and release), so an
// admission check may count them as free: the cache gives them back on demand.

#include <cstdint>
#include <vector>

namespace weft::kv {

class PagePool {
 public:
  // Throws weft::Error (kInvalidArgument) on a negative page count or a page_size below 1.
  PagePool(int num_pages, int page_size);

  int num_pages() const noexcept { return static_cast<int>(ref_counts_.size()); }
  int page_size() const noexcept { return page_size_; }
  int free_pages() const noexcept { return static_cast<int>(free_.size()); }
  int used_pages() const noexcept { return num_pages() - free_pages(); }
  // Cached pages no one but the cache holds (freed on demand by PrefixCache::evict).
  int evictable_pages() const noexcept { return evictable_; }
  // What a new sequence may get: the free pages plus the evictable ones.
  int available_pages() const noexcept { return free_pages() + evictable_; }
  // Pages some sequence holds: the used ones less those only the prefix cache holds.
  int held_pages() const noexcept { return used_pages() - evictable_; }
  // The most pages held at once (held_pages: cached pages nobody uses are not counted).
  int peak_used_pages() const noexcept { return peak_used_; }
  // The pages that hold `tokens` tokens (rounded up).
  int pages_for(int tokens) const noexcept { return (tokens + page_size_ - 1) / page_size_; }

  // Appends `count` fresh pages (reference count 1) to `out`, or none when fewer than `count`
  // are free: all or nothing, so a failed request leaves the pool as it was.
  bool allocate(int count, std::vector<std::int32_t>& out);

  // Another holder of `page` (a sequence sharing it).
  void retain(std::int32_t page);
  // Drops one reference; the page is free again when none is left. Releasing a free page is a
  // bug and throws weft::Error (kInternal).
  void release(std::int32_t page);
  void release_all(const std::vector<std::int32_t>& pages);

  int ref_count(std::int32_t page) const { return ref_counts_.at(static_cast<std::size_t>(page)); }

  // Marks (or unmarks) a held page as holding a reference of the prefix cache's. Throws
  // weft::Error (kInternal) for a free page.
  void set_cached(std::int32_t page, bool cached);
  bool cached(std::int32_t page) const { return cached_.at(static_cast<std::size_t>(page)) != 0; }

  // Starts a new high-water mark from the pages held now (a benchmark's measured phase).
  void reset_peak() noexcept { peak_used_ = held_pages(); }

 private:
  std::vector<int> ref_counts_;
  std::vector<std::uint8_t> cached_;
  std::vector<std::int32_t> free_;  // a stack: recently freed (cache-warm) pages go first
  int page_size_ = 1;
  int peak_used_ = 0;
  int evictable_ = 0;  // cached pages with a reference count of 1
};

}  // namespace weft::kv
