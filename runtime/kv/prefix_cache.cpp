#include "runtime/kv/prefix_cache.hpp"

#include <algorithm>
#include <tuple>

namespace weft::kv {

PrefixCache::PrefixCache(PagePool& pool) : pool_(pool) {}

PrefixCache::~PrefixCache() {
  std::vector<Node*> stack{&root_};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (auto& [key, child] : node->children) {
      pool_.set_cached(child->page, false);
      pool_.release(child->page);
      stack.push_back(child.get());
    }
  }
}

int PrefixCache::match(std::span<const std::int32_t> tokens, int max_tokens,
                       std::vector<std::int32_t>& pages) {
  const int page_size = pool_.page_size();
  max_tokens = std::min(max_tokens, static_cast<int>(tokens.size()));
  ++clock_;
  Node* node = &root_;
  int matched = 0;
  std::vector<std::int32_t> key;
  while (matched + page_size <= max_tokens) {
    key.assign(tokens.begin() + matched, tokens.begin() + matched + page_size);
    auto it = node->children.find(key);
    if (it == node->children.end()) break;
    node = it->second.get();
    touch(*node);
    pool_.retain(node->page);
    pages.push_back(node->page);
    matched += page_size;
  }
  return matched;
}

void PrefixCache::release(std::span<const std::int32_t> tokens, int computed,
                          std::vector<std::int32_t>& pages) {
  const int page_size = pool_.page_size();
  const int full = std::min({computed, static_cast<int>(tokens.size())}) / page_size;
  const int insertable = std::min(full, static_cast<int>(pages.size()));
  ++clock_;
  Node* node = &root_;
  bool own_path = true;  // every node so far holds the sequence's own page
  std::vector<std::int32_t> key;
  std::size_t i = 0;
  for (; i < static_cast<std::size_t>(insertable); ++i) {
    const std::int32_t page = pages[i];
    key.assign(tokens.begin() + static_cast<std::ptrdiff_t>(i) * page_size,
               tokens.begin() + static_cast<std::ptrdiff_t>(i + 1) * page_size);
    auto it = node->children.find(key);
    if (it != node->children.end()) {
      // The tree has this chunk already (the page the sequence matched, or a twin another
      // sequence computed): the sequence's reference goes.
      Node* child = it->second.get();
      if (child->page != page) own_path = false;
      touch(*child);
      pool_.release(page);
      node = child;
      continue;
    }
    // A page held elsewhere (a sibling sample sharing it) is grafted only under the
    // sequence's own pages, which that holder holds too; a page cached at another place
    // cannot be cached twice.
    if ((!own_path && pool_.ref_count(page) > 1) || pool_.cached(page)) break;
    auto child = std::make_unique<Node>();
    child->chunk = key;
    child->page = page;
    child->parent = node;
    child->depth = node->depth + 1;
    pool_.set_cached(page, true);  // the sequence's reference is now the tree's
    Node* raw = child.get();
    raw->slot = entries_.size();
    entries_.push_back({clock_, raw->depth, raw->page, raw});
    node->children.emplace(std::move(key), std::move(child));
    ++nodes_;
    node = raw;
  }
  for (; i < pages.size(); ++i)
    pool_.release(pages[i]);
  pages.clear();
}

void PrefixCache::drop(Node& node) {
  pool_.set_cached(node.page, false);
  pool_.release(node.page);
  entries_[node.slot] = entries_.back();
  entries_[node.slot].node->slot = node.slot;
  entries_.pop_back();
  Node* parent = node.parent;
  const std::vector<std::int32_t> key = node.chunk;  // erasing destroys the node
  parent->children.erase(key);
  --nodes_;
  ++evictions_;
}

int PrefixCache::evict(int count) {
  if (count <= 0 || pool_.evictable_pages() == 0) return 0;
  // Every touch of a node touches its ancestors with the same tick, so a child is never more
  // recently used than its parent: in (last use, deepest first) order, children come first.
  std::vector<Candidate>& candidates = candidates_;  // kept: no allocation per call
  candidates.clear();
  for (const Entry& e : entries_) {
    if (pool_.ref_count(e.page) == 1) candidates.push_back({e.last_use, e.depth, e.node});
  }
  // A heap yields them in that order and orders only as many as are visited: sorting every
  // candidate for each eviction cost milliseconds a step once the pool filled with cached
  // pages (bench/sched_sim_bench, docs/engine.md).
  const auto later = [](const Candidate& a, const Candidate& b) {
    return std::tie(b.last_use, a.depth) < std::tie(a.last_use, b.depth);
  };
  std::make_heap(candidates.begin(), candidates.end(), later);
  int freed = 0;
  for (auto end = candidates.end(); freed < count && end != candidates.begin(); --end) {
    std::pop_heap(candidates.begin(), end, later);
    Node* node = (end - 1)->node;
    if (!node->children.empty()) continue;  // a descendant is held (see the header)
    drop(*node);
    ++freed;
  }
  return freed;
}

bool PrefixCache::make_free(int count) {
  const int missing = count - pool_.free_pages();
  if (missing > 0) evict(missing);
  return pool_.free_pages() >= count;
}

}  // namespace weft::kv
