#include "runtime/sampling/token_history.hpp"

#include <algorithm>
#include <string>

namespace weft::sampling {
namespace {

Error outside_row(const char* what, std::int32_t id, std::size_t vocab) {
  return Error(ErrorCode::kInvalidArgument, std::string(what) + " token " + std::to_string(id) +
                                                " is outside the vocabulary [0, " +
                                                std::to_string(vocab) + ")");
}

}  // namespace

TokenHistory::TokenHistory(const SamplingParams& params, std::span<const std::int32_t> prompt)
    : repetition_penalty_(params.repetition_penalty),
      presence_penalty_(params.presence_penalty),
      frequency_penalty_(params.frequency_penalty),
      tracks_output_(params.repetition_penalty != 1.0f || params.presence_penalty != 0.0f ||
                     params.frequency_penalty != 0.0f) {
  if (repetition_penalty_ != 1.0f) {
    prompt_distinct_.assign(prompt.begin(), prompt.end());
    std::sort(prompt_distinct_.begin(), prompt_distinct_.end());
    prompt_distinct_.erase(std::unique(prompt_distinct_.begin(), prompt_distinct_.end()),
                           prompt_distinct_.end());
  }
}

void TokenHistory::record_output(std::int32_t token) {
  if (tracks_output_) {
    ++output_counts_[token];
  }
}

int TokenHistory::output_count(std::int32_t token) const {
  const auto it = output_counts_.find(token);
  return it == output_counts_.end() ? 0 : it->second;
}

Result<void> TokenHistory::apply_penalties(std::span<float> logits, LogitUndoLog& undo) const {
  if (!tracks_output_) {
    return {};
  }
  const std::size_t vocab = logits.size();
  const auto in_row = [&](std::int32_t id) {
    return id >= 0 && static_cast<std::size_t>(id) < vocab;
  };
  if (repetition_penalty_ != 1.0f) {
    if (!prompt_distinct_.empty() &&
        (!in_row(prompt_distinct_.front()) || !in_row(prompt_distinct_.back()))) {
      return outside_row(
          "prompt",
          in_row(prompt_distinct_.front()) ? prompt_distinct_.back() : prompt_distinct_.front(),
          vocab);
    }
    const auto penalise = [&](std::int32_t id) {
      float& v = logits[static_cast<std::size_t>(id)];
      undo.emplace_back(id, v);
      v = v > 0.0f ? v / repetition_penalty_ : v * repetition_penalty_;
    };
    for (const auto id : prompt_distinct_) {
      penalise(id);
    }
    for (const auto& [id, count] : output_counts_) {
      if (!in_row(id)) {
        return outside_row("output", id, vocab);
      }
      if (!std::binary_search(prompt_distinct_.begin(), prompt_distinct_.end(), id)) {
        penalise(id);
      }
    }
  }
  if (presence_penalty_ != 0.0f || frequency_penalty_ != 0.0f) {
    for (const auto& [id, count] : output_counts_) {
      if (!in_row(id)) {
        return outside_row("output", id, vocab);
      }
      float& v = logits[static_cast<std::size_t>(id)];
      undo.emplace_back(id, v);
      v -= static_cast<float>(count) * frequency_penalty_ + presence_penalty_;
    }
  }
  return {};
}

Result<void> TokenHistory::device_edits(
    const std::vector<std::pair<std::int32_t, float>>& logit_bias, int vocab,
    std::vector<DeviceSampleEdit>& edits) const {
  const auto in_row = [&](std::int32_t id) { return id >= 0 && id < vocab; };
  std::unordered_map<std::int32_t, DeviceSampleEdit> by_id;
  for (const auto& [id, bias] : logit_bias) {
    if (!in_row(id)) {
      return Error(ErrorCode::kInvalidArgument, "sample: logit_bias token " + std::to_string(id) +
                                                    " is outside the vocabulary [0, " +
                                                    std::to_string(vocab) + ")");
    }
    auto& e = by_id[id];
    e.id = id;
    e.bias += bias;
  }
  if (tracks_output_) {
    if (repetition_penalty_ != 1.0f) {
      for (const auto id : prompt_distinct_) {
        if (!in_row(id)) return outside_row("prompt", id, static_cast<std::size_t>(vocab));
        auto& e = by_id[id];
        e.id = id;
        e.repeat = 1;
      }
    }
    for (const auto& [id, count] : output_counts_) {
      if (!in_row(id)) return outside_row("output", id, static_cast<std::size_t>(vocab));
      auto& e = by_id[id];
      e.id = id;
      e.repeat = repetition_penalty_ != 1.0f ? 1 : 0;
      if (presence_penalty_ != 0.0f || frequency_penalty_ != 0.0f) e.count = count;
    }
  }
  for (const auto& [id, e] : by_id)
    edits.push_back(e);
  return {};
}

}  // namespace weft::sampling
