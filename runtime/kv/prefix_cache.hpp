#pragma once
// Prefix caching over KV pages (SGLang's RadixAttention, LightLLM's token-level cache, seed
// 004; vLLM's automatic prefix caching, seed 003): a radix tree whose edges are page-sized
// chunks of tokens. A node holds the page whose KV was computed for its chunk after the
// chunks of its ancestors, so the path from the root to a node spells a token prefix and its
// pages. Only full pages are shared: a sequence's page table begins with the pages it
// matched, read-only, and every token it computes goes to pages of its own, so no page is
// ever copied or written twice. With page_size 1 the tree is token-level.
//
// The tree holds one reference on each of its pages (PagePool::set_cached marks them). A
// sequence that matches a prefix takes another reference on each matched page; when it ends
// (or is preempted) it gives its full pages to the tree. A page that only the tree holds is
// evictable: evict() frees them least recently used first, leaves before their parents.
//
// Every holder of a tree page also holds the page's ancestors (matches are root paths, and
// a finished sequence's page is grafted under another sequence's pages only when no one else
// holds it), so the evictable pages are closed under descent and all of them can be evicted:
// PagePool::evictable_pages() is exact, and admission may count those pages as free.

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "runtime/kv/page_pool.hpp"

namespace weft::kv {

class PrefixCache {
 public:
  // Caches pages of `pool`, which must outlive the cache.
  explicit PrefixCache(PagePool& pool);
  // Gives every page back to the pool; pages sequences still hold stay held by them.
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // The longest cached prefix of tokens[0, max_tokens), in whole pages: appends its pages to
  // `pages` (one new reference each, for the caller) and returns its length in tokens.
  int match(std::span<const std::int32_t> tokens, int max_tokens, std::vector<std::int32_t>& pages);

  // A sequence ends or is preempted: `pages` is its page table and `computed` the tokens of
  // `tokens` whose KV is written. Its full computed pages join the tree (the tree takes the
  // sequence's reference, or drops it where the tree already holds that chunk); the rest are
  // released. `pages` is left empty.
  void release(std::span<const std::int32_t> tokens, int computed,
               std::vector<std::int32_t>& pages);

  // Frees up to `count` evictable pages, least recently used leaves first; returns how many.
  int evict(int count);
  // Evicts what is needed (if it can) so that `count` pages are free; true if they are.
  bool make_free(int count);

  int cached_pages() const noexcept { return nodes_; }
  std::uint64_t evictions() const noexcept { return evictions_; }
  const PagePool& pool() const noexcept { return pool_; }

 private:
  struct Node {
    std::vector<std::int32_t> chunk;  // page_size tokens
    std::int32_t page = -1;
    Node* parent = nullptr;
    int depth = 0;
    std::size_t slot = 0;  // its entry in entries_
    std::map<std::vector<std::int32_t>, std::unique_ptr<Node>> children;
  };

  void drop(Node& node);  // removes a leaf and frees its page

  PagePool& pool_;
  Node root_;
  int nodes_ = 0;
  // One entry per node but the root, in no order, with what eviction orders by: evict() scans
  // this compact array instead of walking the tree (once the pool is full of cached pages,
  // evictions run in most steps). A node's last use lives here only.
  struct Entry {
    std::uint64_t last_use = 0;
    int depth = 0;
    std::int32_t page = -1;
    Node* node = nullptr;
  };
  void touch(const Node& node) { entries_[node.slot].last_use = clock_; }
  std::vector<Entry> entries_;
  struct Candidate {
    std::uint64_t last_use;
    int depth;
    Node* node;
  };
  std::vector<Candidate> candidates_;  // evict()'s scratch
  std::uint64_t clock_ = 0;
  std::uint64_t evictions_ = 0;
};

}  // namespace weft::kv
