// SequenceSampler's rows for beam search: the log-probabilities beams are ranked by.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "runtime/sampling/logit_row.hpp"
#include "runtime/sampling/sequence_sampler.hpp"

namespace weft::sampling {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

Error beam_error(ErrorCode code, std::string message) {
  return Error(code, "sample: " + std::move(message));
}

// The k most likely of (id, logit) entries as log-softmax values over a normaliser log_z.
std::vector<TokenLogprob> most_likely(std::vector<TokenLogprob> entries, int k, double log_z) {
  const auto keep = std::min(entries.size(), static_cast<std::size_t>(std::max(0, k)));
  std::partial_sort(entries.begin(), entries.begin() + static_cast<std::ptrdiff_t>(keep),
                    entries.end(), [](const TokenLogprob& a, const TokenLogprob& b) {
                      return a.logprob != b.logprob ? a.logprob > b.logprob : a.id < b.id;
                    });
  entries.resize(keep);
  for (auto& e : entries)
    e.logprob = static_cast<float>(e.logprob - log_z);
  return entries;
}

}  // namespace

Result<std::vector<TokenLogprob>> SequenceSampler::beam_candidates(std::span<float> logits,
                                                                   const std::uint32_t* allowed,
                                                                   int k) {
  const std::size_t vocab = logits.size();
  float* x = logits.data();
  if (vocab == 0) return beam_error(ErrorCode::kInvalidArgument, "the logits row is empty");
  if (allowed && apply_token_bitmask(x, vocab, allowed) == 0) {
    return beam_error(ErrorCode::kInvalidArgument, "the allowed-token bitmask allows none of the " +
                                                       std::to_string(vocab) +
                                                       " tokens (at least one must be allowed)");
  }
  const RowMax raw = row_max(x, vocab);
  if (raw.non_finite) {
    const std::size_t i = find_non_finite(x, vocab);
    return beam_error(ErrorCode::kInternal, "logit of token " + std::to_string(i) + " is " +
                                                (std::isnan(x[i]) ? "nan" : "+inf") +
                                                "; logits must be finite or -inf");
  }
  if (raw.max == -kInf) {
    return beam_error(ErrorCode::kInvalidArgument,
                      "every allowed token has logit -inf (at least one must be finite)");
  }
  // Bias and penalties in place, undone on the way out (the row stays the raw row).
  LogitUndoLog& undo = undo_;
  struct Restore {
    std::span<float> row;
    LogitUndoLog& log;
    ~Restore() {
      for (auto it = log.rbegin(); it != log.rend(); ++it)
        row[static_cast<std::size_t>(it->first)] = it->second;
      log.clear();
    }
  } restore{logits, undo};
  for (const auto& [id, bias] : params_.logit_bias) {
    if (id < 0 || static_cast<std::size_t>(id) >= vocab) {
      return beam_error(ErrorCode::kInvalidArgument, "logit_bias token " + std::to_string(id) +
                                                         " is outside the vocabulary [0, " +
                                                         std::to_string(vocab) + ")");
    }
    undo.emplace_back(id, x[static_cast<std::size_t>(id)]);
    x[static_cast<std::size_t>(id)] += bias;
  }
  if (auto penalised = history_.apply_penalties(logits, undo); !penalised) {
    return beam_error(penalised.error().code(), penalised.error().what());
  }
  const RowMax shifted = row_max(x, vocab);
  if (shifted.non_finite || shifted.max == -kInf) {
    return beam_error(ErrorCode::kInvalidArgument,
                      "logit_bias or a penalty left no finite logit or made one +inf");
  }
  const double log_z = shifted.max + std::log(sum_exp(x, vocab, shifted.max, 1.0f, nullptr));
  std::vector<TokenLogprob> top = top_entries(x, vocab, std::min<int>(k, static_cast<int>(vocab)));
  for (auto& t : top)
    t.logprob = static_cast<float>(t.logprob - log_z);
  return top;
}

Result<DeviceSampleRow> SequenceSampler::beam_device_row(
    int vocab, std::vector<DeviceSampleEdit>& edits) const {
  DeviceSampleRow r;
  r.edit_begin = static_cast<std::int32_t>(edits.size());
  if (auto ok = history_.device_edits(params_.logit_bias, vocab, edits); !ok) {
    edits.resize(static_cast<std::size_t>(r.edit_begin));
    return beam_error(ok.error().code(), ok.error().what());
  }
  r.edit_count = static_cast<std::int32_t>(edits.size()) - r.edit_begin;
  r.repetition_penalty = params_.repetition_penalty;
  r.presence_penalty = params_.presence_penalty;
  r.frequency_penalty = params_.frequency_penalty;
  // Every token of nonzero weight at temperature 1 comes back when they fit the candidate
  // buffer (their sum is then the whole row's normaliser), else the raw row does.
  r.mode = DeviceSampleMode::kFloor;
  r.temperature = 1.0f;
  r.flags = kHostFinish;
  return r;
}

Result<std::vector<TokenLogprob>> SequenceSampler::finish_beam_device(
    const DeviceSampleResult& result, std::span<const DeviceCandidate> candidates,
    std::span<float> host_row, int k) {
  if (result.status == DeviceSampleStatus::kNoneAllowed) {
    return beam_error(ErrorCode::kInvalidArgument,
                      "the allowed-token bitmask allows none of the tokens (at least one must "
                      "be allowed)");
  }
  if (result.status == DeviceSampleStatus::kHostRow) {
    if (host_row.empty()) {
      return beam_error(ErrorCode::kInternal, "the device asked for a host row it did not send");
    }
    return beam_candidates(host_row, nullptr, k);
  }
  if (result.candidates <= 0 || result.offset < 0 ||
      static_cast<std::size_t>(result.offset) + static_cast<std::size_t>(result.candidates) >
          candidates.size()) {
    return beam_error(ErrorCode::kInternal, "the device returned no candidates for a beam row");
  }
  candidates = candidates.subspan(static_cast<std::size_t>(result.offset),
                                  static_cast<std::size_t>(result.candidates));
  double total = 0.0;
  std::vector<TokenLogprob> entries;
  entries.reserve(candidates.size());
  for (const auto& c : candidates) {
    total += c.weight;
    // weight = exp(x - max): its log is the logit less the row's maximum after the edits.
    entries.push_back({c.id, std::log(c.weight)});
  }
  return most_likely(std::move(entries), k, std::log(total));
}

}  // namespace weft::sampling
