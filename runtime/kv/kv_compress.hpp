#pragma once
// KV-Compress's eviction policy (Rehg 2024, seed 003; SnapKV's observation window): after a
// sequence's prompt is prefilled, each (layer, kv head) keeps the cached positions the last
// `window` prompt queries paid the most attention to, summed over those queries and over the
// query heads that share the kv head (query-group compression: scores are aggregated per kv
// head, never per repeated query head). Eviction is in whole pages' worth of slots, so a
// compressed sequence frees exactly that many pages; survivors are compacted, in position
// order, into the first slots of the sequence's pages (their keys were rotated when they were
// stored, so they keep their original rotary positions; only the slot<->position map changes).
//
// Two ways to share the evictions among a sequence's (layer, kv head) pairs
// (KvCompressHeads):
// - uniform (the default): every kv head of every layer evicts the same number of slots (the
//   rate applies per head), so one slot offset per sequence says where the next token goes:
//   slot = position - evicted. Which slots each head keeps differs per head and per layer.
// - variable (KV-Compress's per-head budgets): the sequence's (layer, kv head) pairs together
//   evict what the uniform rule would, each in whole pages' worth of slots, the
//   least-attended pages' worth first wherever they are, so a head the window attends to
//   broadly keeps more than one it ignores, in any layer. Each pair then has its own slot
//   offset, and its slots live in "cells" (one kv head's rows of one layer's block of a page,
//   page_size tokens) that HeadCells places among the sequence's pages. Since every count is a
//   whole number of pages' worth, the sequence needs exactly the pages the uniform rule leaves
//   it, now and as it grows: the scheduler's accounting is the same for both.
//
// No attention sinks are forced: the first tokens, which draw large attention in most
// models (StreamingLLM), are kept by the scores themselves when they matter.

#include <span>
#include <string_view>
#include <vector>

#include "weft/error.hpp"

namespace weft::kv {

enum class KvCompressHeads { kUniform, kVariable };

// "uniform" / "variable".
const char* name(KvCompressHeads heads) noexcept;
// The error names the value and the choices.
Result<KvCompressHeads> parse_kv_compress_heads(std::string_view text);

struct KvCompressConfig {
  double rate = 0.0;  // in [0, 1): the share of a head's slots to evict; 0 turns it off
  int window = 16;    // the last prompt positions whose queries score the cache (always kept)
  KvCompressHeads heads = KvCompressHeads::kUniform;

  bool enabled() const noexcept { return rate > 0.0; }
};

// rate in [0, 1) and window in [1, 4096]; the error names the field and the value.
Result<void> check(const KvCompressConfig& config);

// Slots each kv head of a sequence holding `slots` slots evicts: rate × slots rounded down to
// whole pages, never so many that fewer than `window` slots stay (rounded down to pages too).
int evicted_slots(int slots, const KvCompressConfig& config, int page_size);

// The slots a head keeps, ascending: the last `window` slots, and of the others the
// slots - window - evict with the highest score (a tie keeps the earlier slot).
// scores: one per slot.
void select_kept_slots(std::span<const float> scores, int evict, int window,
                       std::vector<int>& kept);

// Variable evictions: scores is [units][slots], one row per (layer, kv head) pair ("unit",
// layer * kv_heads + head). The units evict units x evict slots together, each a multiple of
// page_size and at most its slots - window rounded down to pages, chosen a page's worth at a
// time: a unit's next page's worth is its lowest-scored remaining slots (select_kept_slots'
// order: a tie evicts the later slot first), and the page's worth with the smallest summed
// score goes first (a tie: the lower unit). As each unit's successive sums never decrease,
// this evicts the least total score any whole-page split can. evict must be a multiple of
// page_size that the uniform rule allows (evict + window <= slots). Returns each unit's count.
std::vector<int> head_evictions(std::span<const float> scores, int units, int evict, int window,
                                int page_size);

// Where each unit's slots live in a sequence's pages after a variable compression (every
// count a multiple of page_size, adding to units x the mean). A page holds one cell per unit
// (that kv head's rows of that layer's block). Unit u keeps n_u = pages(slots - evicted_u)
// cells: its own cells of the first min(n_u, P) pages (P: the pages the sequence keeps), then,
// if n_u > P, the cells units with n_u' < P left free in those pages (listed by unit, then
// page), taken in unit order; past n_u, as the sequence grows, its own cells of the pages
// added after the first P (every unit fills its last cell at the same token, since every
// count is a multiple of page_size, so each new page gives every unit one cell).
class HeadCells {
 public:
  struct Cell {
    int page = 0;  // index into the sequence's page table
    int unit = 0;  // whose cell of that page: layer * kv_heads + kv head
  };

  HeadCells() = default;
  // slots: the sequence's slots when it compressed (before the eviction). The counts must be
  // multiples of page_size adding to a multiple of the unit count, each < slots.
  HeadCells(std::vector<int> evicted, int slots, int page_size);

  int units() const noexcept { return static_cast<int>(evicted_.size()); }
  int evicted(int unit) const { return evicted_[static_cast<std::size_t>(unit)]; }
  int mean_evicted() const noexcept { return mean_; }
  int pages() const noexcept { return pages_; }  // P
  // The cell holding unit's slots [index * page_size, (index + 1) * page_size).
  Cell cell(int unit, int index) const;

 private:
  std::vector<int> evicted_;
  std::vector<int> kept_cells_;      // n_u
  std::vector<int> overflow_begin_;  // index into free_ of unit u's first borrowed cell
  std::vector<Cell> free_;
  int pages_ = 0;
  int mean_ = 0;
};

}  // namespace weft::kv
