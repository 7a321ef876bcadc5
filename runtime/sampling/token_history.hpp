#pragma once
// The token counts a sequence's penalties need, and the penalties themselves. Only what the
// request's parameters use is kept: the prompt's distinct ids when repetition_penalty != 1,
// the output's counts when any penalty is on.

#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/sampling/device_sampling.hpp"
#include "runtime/sampling/sampling_params.hpp"

namespace weft::sampling {

// (id, value before the change), so the sampler can restore the raw row for logprobs.
using LogitUndoLog = std::vector<std::pair<std::int32_t, float>>;

class TokenHistory {
 public:
  TokenHistory(const SamplingParams& params, std::span<const std::int32_t> prompt);

  void record_output(std::int32_t token);

  // Repetition penalty (Keskar et al. 2019, CTRL; HF RepetitionPenaltyLogitsProcessor, vLLM):
  // each distinct token of prompt + output once, logit / penalty when positive, logit *
  // penalty otherwise. Then OpenAI's presence and frequency penalties over the output:
  // logit -= count * frequency_penalty + (count > 0) * presence_penalty. Every changed entry
  // is logged first. An id outside the row is an error (the caller's prompt or accept()).
  Result<void> apply_penalties(std::span<float> logits, LogitUndoLog& undo) const;

  int output_count(std::int32_t token) const;

  // The same changes for a device sampler: one edit per token the bias or a penalty touches
  // (a repeated logit_bias id has its biases summed), appended to `edits`. An id outside the
  // vocabulary is the error apply_penalties would give.
  Result<void> device_edits(const std::vector<std::pair<std::int32_t, float>>& logit_bias,
                            int vocab, std::vector<DeviceSampleEdit>& edits) const;

 private:
  float repetition_penalty_;
  float presence_penalty_;
  float frequency_penalty_;
  bool tracks_output_;
  std::vector<std::int32_t> prompt_distinct_;  // sorted
  std::unordered_map<std::int32_t, std::int32_t> output_counts_;
};

}  // namespace weft::sampling
