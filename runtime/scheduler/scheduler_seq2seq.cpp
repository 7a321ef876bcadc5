// Encoder-decoder requests in the scheduler (docs/seq2seq.md, "In the engine"): a sequence
// whose decoder runs as a decoder-only sequence does (paged self-attention KV, prefill chunks
// of its decoder prompt, one token a step after), and which also holds its encoder output's
// cross-attention keys and values in pages of the same pool from admission to its end.

#include <string>

#include "runtime/scheduler/admission.hpp"
#include "runtime/scheduler/scheduler.hpp"

namespace weft::sched {

Result<void> Scheduler::add_seq2seq(std::uint64_t id, std::vector<std::int32_t> source,
                                    std::vector<std::int32_t> decoder_prompt, int max_new_tokens) {
  if (source.empty()) return Error(ErrorCode::kInvalidArgument, "scheduler: empty encoder input");
  if (decoder_prompt.empty()) {
    return Error(ErrorCode::kInvalidArgument,
                 "scheduler: an encoder-decoder request needs its decoder start token");
  }
  const int cross = pages_for(static_cast<int>(source.size()));
  const std::int64_t alone =
      peak_pages({KvDemand{static_cast<int>(decoder_prompt.size()), max_new_tokens, cross}},
                 config_.page_size);
  if (max_new_tokens >= 1 && alone > config_.num_pages) {
    return Error(ErrorCode::kResourceExhausted,
                 "request needs up to " + std::to_string(alone) + " KV pages (" +
                     std::to_string(cross) + " for its " + std::to_string(source.size()) +
                     " encoder tokens' cross-attention, the rest for " +
                     std::to_string(decoder_prompt.size()) + " decoder prompt + " +
                     std::to_string(max_new_tokens) + " new tokens) but the pool has " +
                     std::to_string(config_.num_pages));
  }
  if (auto added = add(id, std::move(decoder_prompt), max_new_tokens); !added) return added;
  sequences_.at(id).source = std::move(source);
  return {};
}

bool Scheduler::take_cross_pages(Sequence& s) {
  if (s.source.empty() || !s.cross_pages.empty()) return true;
  const int needed = fixed_pages(s);
  if (cache_) cache_->make_free(needed);
  return pool_.allocate(needed, s.cross_pages);
}

}  // namespace weft::sched
