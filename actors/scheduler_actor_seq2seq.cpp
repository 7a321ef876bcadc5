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
  auto added =
      scheduler_.add_seq2seq(id, std::move(source), std::move(decoder_prompt), params.max_tokens);
  if (!added) throw added.error();
  add_samples(id, params, stream, source_len, /*constrained=*/false, /*speculate=*/false);
}

}  // namespace weft::actors
