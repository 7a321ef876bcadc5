#include "runtime/kv/page_pool.hpp"

#include <algorithm>
#include <string>

#include "weft/error.hpp"

namespace weft::kv {

PagePool::PagePool(int num_pages, int page_size) : page_size_(page_size) {
  if (num_pages < 0) throw Error(ErrorCode::kInvalidArgument, "PagePool: negative page count");
  if (page_size < 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "PagePool: page_size " + std::to_string(page_size) + " must be at least 1");
  }
  ref_counts_.assign(static_cast<std::size_t>(num_pages), 0);
  cached_.assign(static_cast<std::size_t>(num_pages), 0);
  free_.reserve(static_cast<std::size_t>(num_pages));
  for (int p = num_pages - 1; p >= 0; --p)
    free_.push_back(p);  // page 0 is handed out first
}

bool PagePool::allocate(int count, std::vector<std::int32_t>& out) {
  if (count < 0 || count > free_pages()) return false;
  for (int i = 0; i < count; ++i) {
    const std::int32_t page = free_.back();
    free_.pop_back();
    ref_counts_[static_cast<std::size_t>(page)] = 1;
    out.push_back(page);
  }
  peak_used_ = std::max(peak_used_, held_pages());
  return true;
}

void PagePool::retain(std::int32_t page) {
  int& count = ref_counts_.at(static_cast<std::size_t>(page));
  if (count == 0) {
    throw Error(ErrorCode::kInternal, "PagePool: retain of free page " + std::to_string(page));
  }
  if (count == 1 && cached_[static_cast<std::size_t>(page)]) {
    --evictable_;  // a cached page back in use
    peak_used_ = std::max(peak_used_, held_pages());
  }
  ++count;
}

void PagePool::release(std::int32_t page) {
  int& count = ref_counts_.at(static_cast<std::size_t>(page));
  if (count == 0) {
    throw Error(ErrorCode::kInternal, "PagePool: release of free page " + std::to_string(page));
  }
  const bool is_cached = cached_[static_cast<std::size_t>(page)] != 0;
  if (is_cached && count == 1) {
    // The cache's own reference goes last, and the cache unmarks the page before dropping it.
    throw Error(ErrorCode::kInternal,
                "PagePool: release of cached page " + std::to_string(page) + "'s last reference");
  }
  if (--count == 0) free_.push_back(page);
  if (is_cached && count == 1) ++evictable_;
}

void PagePool::set_cached(std::int32_t page, bool cached) {
  const int count = ref_counts_.at(static_cast<std::size_t>(page));
  if (count == 0) {
    throw Error(ErrorCode::kInternal, "PagePool: set_cached of free page " + std::to_string(page));
  }
  auto& flag = cached_[static_cast<std::size_t>(page)];
  if ((flag != 0) == cached) return;
  flag = cached ? 1 : 0;
  if (count == 1) evictable_ += cached ? 1 : -1;
}

void PagePool::release_all(const std::vector<std::int32_t>& pages) {
  for (std::int32_t page : pages)
    release(page);
}

}  // namespace weft::kv
