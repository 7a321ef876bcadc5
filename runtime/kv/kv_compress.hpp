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
// Every kv head of a sequence evicts the same number of slots (the rate applies per head),
// so one slot offset per sequence says where the next token goes: slot = position - evicted.
// Which slots each head keeps differs per head and per layer.
//
// No attention sinks are forced: the first tokens, which draw large attention in most
// models (StreamingLLM), are kept by the scores themselves when they matter.

#include <span>
#include <vector>

#include "weft/error.hpp"

namespace weft::kv {

struct KvCompressConfig {
  double rate = 0.0;  // in [0, 1): the share of a head's slots to evict; 0 turns it off
  int window = 16;    // the last prompt positions whose queries score the cache (always kept)

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

}  // namespace weft::kv
