// Encoder-decoder requests on the scheduler actor: queued through Scheduler::add_seq2seq, then
// stepped, sampled, detokenized and finished by the same loop as decoder-only requests (the
// plan's slices carry their cross-attention pages and, in their first step, their encoder
// input; docs/seq2seq.md).

#include "actors/scheduler_actor.hpp"

namespace weft::actors {

void SchedulerActor::add_seq2seq_request(std::uint64_t id, std::vector<std::int32_t> source,
                                         std::vector<std::int32_t> decoder_prompt,
                                         SamplingParams params,
                                         std::shared_ptr<RequestStream> stream) {
  if (stopping_) throw Error(ErrorCode::kShutdown, "the engine is shutting down");
  const int source_len = static_cast<int>(source.size());
  const int n = std::max(1, params.n);
  auto added =
      scheduler_.add_seq2seq(id, std::move(source), std::move(decoder_prompt), params.max_tokens);
  if (!added) throw added.error();
  std::vector<std::uint64_t>& ids = samples_[id];
  ids.push_back(id);
  for (int i = 1; i < n; ++i) {
    auto sibling = scheduler_.add_sibling(id + static_cast<std::uint64_t>(i), id);
    if (!sibling) {
      for (std::uint64_t added_id : ids)
        scheduler_.remove(added_id);
      samples_.erase(id);
      throw sibling.error();
    }
    ids.push_back(id + static_cast<std::uint64_t>(i));
  }
  for (int i = 0; i < n; ++i) {
    live_.emplace(id + static_cast<std::uint64_t>(i),
                  LiveRequest{stream, params, source_len, i, id, false, false});
  }
  metrics_.prompt_tokens += static_cast<std::uint64_t>(source_len);
  wake_.cancel();  // the loop may be idle
}

}  // namespace weft::actors
