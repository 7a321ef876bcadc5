#include "runtime/sampling/sequence_sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

#include "runtime/sampling/logit_row.hpp"
#include "runtime/sampling/philox.hpp"
#include "runtime/sampling/truncation.hpp"

namespace weft::sampling {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
// top-p's first guess at its floor assumes the tail it drops spreads over at most this many
// tokens; when wrong it costs one more compare pass, never a wrong answer.
constexpr double kTightTail = 256.0;

// Vocabulary-sized buffers live per thread, not per sequence: 256 running sequences with a
// 128K vocabulary would otherwise hold 256 x 1.5 MB of scratch between steps.
struct Scratch {
  std::vector<float> weights;
  std::vector<std::int32_t> ids;
  std::vector<Candidate> candidates;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

Error row_error(ErrorCode code, std::string message) {
  return Error(code, "sample: " + std::move(message));
}

// Restores the entries the bias and penalties changed, newest first, so a token changed
// twice gets back its first value: the row is then the raw (masked) row again.
class UndoOnExit {
 public:
  UndoOnExit(std::span<float> row, LogitUndoLog& log) : row_(row), log_(log) {}
  ~UndoOnExit() {
    for (auto it = log_.rbegin(); it != log_.rend(); ++it) {
      row_[static_cast<std::size_t>(it->first)] = it->second;
    }
    log_.clear();
  }
  UndoOnExit(const UndoOnExit&) = delete;
  UndoOnExit& operator=(const UndoOnExit&) = delete;

 private:
  std::span<float> row_;
  LogitUndoLog& log_;
};

// Inverse CDF: the first candidate whose cumulative weight exceeds u * total. Summed in
// double; the last candidate with weight absorbs rounding so a draw never falls off the end.
std::int32_t draw(std::span<const Candidate> c, double u) {
  double total = 0.0;
  for (const auto& e : c) {
    total += e.weight;
  }
  const double target = u * total;
  double cumulative = 0.0;
  std::int32_t last = c.front().id;
  for (const auto& e : c) {
    if (e.weight <= 0.0f) {
      continue;
    }
    cumulative += e.weight;
    last = e.id;
    if (cumulative > target) {
      return e.id;
    }
  }
  return last;
}

}  // namespace

struct SequenceSampler::Choice {
  std::int32_t id = 0;
  double surprise = std::numeric_limits<double>::quiet_NaN();  // mirostat's, in bits
  float raw_max = 0.0f;
  double raw_sum = -1.0;  // sum exp(raw - raw_max) when the draw already computed it
};

SequenceSampler::SequenceSampler(const SamplingParams& params, std::span<const std::int32_t> prompt,
                                 std::uint64_t seed, int sample_index)
    : params_(params),
      mirostat_mu_(2.0 * static_cast<double>(params.mirostat_tau)),
      seed_(seed),
      sample_index_(static_cast<std::uint32_t>(sample_index)),
      history_(params, prompt) {
  if (params.fsd != Fsd::kOff) anti_lm_.emplace(params.fsd_n, params.fsd_beta, prompt);
}

void SequenceSampler::record(std::int32_t token) {
  history_.record_output(token);
  if (anti_lm_) anti_lm_->push(token);
  ++generated_;
}

bool SequenceSampler::fsd_step() const {
  return anti_lm_.has_value() && !fsd_samples_at(params_, seed_, sample_index_, generated_);
}

std::pair<std::int32_t, double> SequenceSampler::draw_candidates(std::vector<Candidate>& c,
                                                                 double u, int vocab) const {
  if (params_.mirostat == 0) {
    return {draw(c, u), std::numeric_limits<double>::quiet_NaN()};
  }
  mirostat_truncate(c, params_.mirostat, mirostat_mu_, vocab);
  const std::int32_t id = draw(c, u);
  double mass = 0.0, chosen = 0.0;
  for (const auto& e : c) {
    mass += e.weight;
    if (e.id == id) chosen = e.weight;
  }
  return {id, -std::log2(chosen / mass)};
}

void SequenceSampler::update_mirostat(double surprise) {
  if (params_.mirostat != 0 && std::isfinite(surprise)) {
    mirostat_mu_ -= params_.mirostat_eta * (surprise - params_.mirostat_tau);
  }
}

void SequenceSampler::accept(std::int32_t token) {
  record(token);
}

SampledToken SequenceSampler::sample(std::span<float> logits, const std::uint32_t* allowed) {
  return try_sample(logits, allowed).value();
}

Result<SampledToken> SequenceSampler::try_sample(std::span<float> logits,
                                                 const std::uint32_t* allowed) {
  auto choice = choose(logits, allowed, nullptr);
  if (!choice) {
    return choice.error();
  }
  const float* x = logits.data();
  const std::size_t vocab = logits.size();
  if (choice->raw_sum < 0.0) {
    choice->raw_sum = sum_exp(x, vocab, choice->raw_max, 1.0f, nullptr);
  }
  const double log_z = choice->raw_max + std::log(choice->raw_sum);
  SampledToken out{
      choice->id, static_cast<float>(x[static_cast<std::size_t>(choice->id)] - log_z), {}};
  if (params_.logprobs > 0) {
    out.top = top_entries(x, vocab, params_.logprobs);
    for (auto& t : out.top) {
      t.logprob = static_cast<float>(t.logprob - log_z);
    }
  }
  record(out.id);
  update_mirostat(choice->surprise);
  return out;
}

Result<std::vector<TokenLogprob>> SequenceSampler::distribution(std::span<float> logits,
                                                                const std::uint32_t* allowed) {
  std::vector<TokenLogprob> out;
  auto choice = choose(logits, allowed, &out);
  if (!choice) {
    return choice.error();
  }
  return out;
}

Result<SequenceSampler::Choice> SequenceSampler::choose(std::span<float> logits,
                                                        const std::uint32_t* allowed,
                                                        std::vector<TokenLogprob>* dist_out) {
  const std::size_t vocab = logits.size();
  float* x = logits.data();
  if (vocab == 0) {
    return row_error(ErrorCode::kInvalidArgument, "the logits row is empty");
  }
  if (allowed && apply_token_bitmask(x, vocab, allowed) == 0) {
    return row_error(ErrorCode::kInvalidArgument, "the allowed-token bitmask allows none of the " +
                                                      std::to_string(vocab) +
                                                      " tokens (at least one must be allowed)");
  }
  const RowMax raw = row_max(x, vocab);
  if (raw.non_finite) {
    const std::size_t i = find_non_finite(x, vocab);
    return row_error(ErrorCode::kInternal, "logit of token " + std::to_string(i) + " is " +
                                               (std::isnan(x[i]) ? "nan" : "+inf") +
                                               "; logits must be finite or -inf");
  }
  if (raw.max == -kInf) {
    return row_error(ErrorCode::kInvalidArgument,
                     "every allowed token has logit -inf (at least one must be finite)");
  }

  UndoOnExit undo(logits, undo_);
  for (const auto& [id, bias] : params_.logit_bias) {
    if (id < 0 || static_cast<std::size_t>(id) >= vocab) {
      return row_error(ErrorCode::kInvalidArgument, "logit_bias token " + std::to_string(id) +
                                                        " is outside the vocabulary [0, " +
                                                        std::to_string(vocab) + ")");
    }
    float& v = x[static_cast<std::size_t>(id)];
    undo_.emplace_back(id, v);
    v += bias;
  }
  if (auto penalised = history_.apply_penalties(logits, undo_); !penalised) {
    return row_error(penalised.error().code(), penalised.error().what());
  }

  Choice out;
  out.raw_max = raw.max;
  if (fsd_step()) {
    // FSD: the pool of most likely tokens at FSD's temperature (never greedy), then its score.
    const RowMax shifted = row_max(x, vocab);
    if (shifted.non_finite) {
      return row_error(ErrorCode::kInvalidArgument,
                       "logit_bias or a penalty made a logit +inf (logits must stay finite)");
    }
    if (shifted.max == -kInf) {
      return row_error(ErrorCode::kInvalidArgument,
                       "logit_bias or a penalty left no finite logit (at least one must be)");
    }
    const float inv_t = 1.0f / fsd_temperature(params_);
    Scratch& s = scratch();
    s.ids.clear();
    s.candidates.clear();
    const int pool = std::min(params_.fsd_pool_size, static_cast<int>(vocab));
    const float kth = kth_largest(x, vocab, pool);
    collect_at_least(x, vocab, kth == -kInf ? std::numeric_limits<float>::lowest() : kth, s.ids);
    for (const auto id : s.ids) {
      const float w = std::exp((x[static_cast<std::size_t>(id)] - shifted.max) * inv_t);
      s.candidates.push_back({0.0f, w, id});
    }
    out.id = fsd_choose(s.candidates, *anti_lm_, params_);
    if (dist_out) dist_out->push_back({out.id, 1.0f});
    return out;
  }
  // A temperature so small that 1 / T overflows leaves only the maximum: greedy.
  if (params_.temperature == 0.0f || !std::isfinite(1.0f / params_.temperature)) {
    // An unchanged row keeps the raw maximum.
    out.id = undo_.empty() ? argmax(x, vocab, raw.max) : argmax(x, vocab);
    if (dist_out) {
      dist_out->push_back({out.id, 1.0f});
    }
    return out;
  }

  const RowMax shifted = row_max(x, vocab);
  if (shifted.non_finite) {
    return row_error(ErrorCode::kInvalidArgument,
                     "logit_bias or a penalty made a logit +inf (logits must stay finite)");
  }
  const float inv_t = 1.0f / params_.temperature;
  const double u = philox_uniform(seed_, sample_index_, static_cast<std::uint64_t>(generated_));
  Scratch& s = scratch();
  s.ids.clear();
  s.candidates.clear();
  double total = 0.0;
  if (params_.top_k > 0 && static_cast<std::size_t>(params_.top_k) < vocab) {
    // Top-k as a threshold: only the survivors' weights are ever computed.
    const float kth = kth_largest(x, vocab, params_.top_k);
    collect_at_least(x, vocab, kth == -kInf ? std::numeric_limits<float>::lowest() : kth, s.ids);
    for (const auto id : s.ids) {
      const float w = std::exp((x[static_cast<std::size_t>(id)] - shifted.max) * inv_t);
      s.candidates.push_back({0.0f, w, id});
      total += w;
    }
  } else {
    s.weights.resize(vocab);
    total = sum_exp(x, vocab, shifted.max, inv_t, s.weights.data());
    // Unchanged row at temperature 1: the raw normaliser is this one.
    if (undo_.empty() && params_.temperature == 1.0f) {
      out.raw_sum = total;
    }
    if (!truncates(params_)) {
      if (dist_out) {
        for (std::size_t i = 0; i < vocab; ++i) {
          if (s.weights[i] > 0.0f) {
            dist_out->push_back(
                {static_cast<std::int32_t>(i), static_cast<float>(s.weights[i] / total)});
          }
        }
      } else {
        out.id = inverse_cdf(s.weights.data(), vocab, u * total);
      }
      return out;
    }
    // Every token below `safe` is removed by min-p, or lies in the tail that top-p drops: the
    // tokens under (1 - top_p) * total / vocab cannot together hold more than 1 - top_p of
    // the mass. Only the tokens above it become candidates. A real model's top-p set is far
    // smaller, so a tighter floor is tried first; it is exact whenever its candidates already
    // hold top_p of the mass (they are then a prefix that contains top-p's).
    const float denorm = std::numeric_limits<float>::denorm_min();
    // Tail-free sampling and mirostat look at the whole distribution: no floor.
    const bool whole = params_.tfs_z < 1.0f || params_.mirostat != 0;
    float safe = whole ? denorm : std::max(params_.min_p, denorm);
    float tight = safe;
    if (params_.top_p < 1.0f && !whole) {
      const double tail = (1.0 - params_.top_p) * total;
      safe = std::max(safe, static_cast<float>(tail / static_cast<double>(vocab)));
      tight = std::max(safe, static_cast<float>(tail / kTightTail));
    }
    collect_at_least(s.weights.data(), vocab, tight, s.ids);
    if (tight > safe) {
      double mass = 0.0;
      for (const auto id : s.ids) {
        mass += s.weights[static_cast<std::size_t>(id)];
      }
      if (mass < params_.top_p * total) {
        s.ids.clear();
        collect_at_least(s.weights.data(), vocab, safe, s.ids);
      }
    }
    for (const auto id : s.ids) {
      s.candidates.push_back({0.0f, s.weights[static_cast<std::size_t>(id)], id});
    }
  }
  truncate(s.candidates, total, params_);
  if (params_.mirostat != 0 && dist_out) {
    mirostat_truncate(s.candidates, params_.mirostat, mirostat_mu_, static_cast<int>(vocab));
  }
  if (dist_out) {
    double mass = 0.0;
    for (const auto& c : s.candidates) {
      mass += c.weight;
    }
    for (const auto& c : s.candidates) {
      dist_out->push_back({c.id, static_cast<float>(c.weight / mass)});
    }
    return out;
  }
  std::tie(out.id, out.surprise) = draw_candidates(s.candidates, u, static_cast<int>(vocab));
  return out;
}

Result<DeviceSampleRow> SequenceSampler::device_row(int vocab,
                                                    std::vector<DeviceSampleEdit>& edits) const {
  vocab_ = vocab;
  DeviceSampleRow r;
  r.edit_begin = static_cast<std::int32_t>(edits.size());
  if (auto ok = history_.device_edits(params_.logit_bias, vocab, edits); !ok) {
    edits.resize(static_cast<std::size_t>(r.edit_begin));
    return row_error(ok.error().code(), ok.error().what());
  }
  r.edit_count = static_cast<std::int32_t>(edits.size()) - r.edit_begin;
  r.logprobs = params_.logprobs;
  r.repetition_penalty = params_.repetition_penalty;
  r.presence_penalty = params_.presence_penalty;
  r.frequency_penalty = params_.frequency_penalty;
  // The same branches as choose().
  if (fsd_step()) {
    // The pool's weights (the top-k set at FSD's temperature) come back as candidates; the
    // host scores them. A pool too large for the candidate buffer comes back as the raw row.
    r.temperature = fsd_temperature(params_);
    if (params_.fsd_pool_size < vocab) {
      r.mode = DeviceSampleMode::kTopK;
      r.top_k = params_.fsd_pool_size;
    } else {
      r.mode = DeviceSampleMode::kFloor;
    }
    r.flags = kHostFinish;
    return r;
  }
  if (params_.temperature == 0.0f || !std::isfinite(1.0f / params_.temperature)) {
    r.mode = DeviceSampleMode::kGreedy;
    return r;
  }
  r.temperature = params_.temperature;
  r.top_p = params_.top_p;
  r.min_p = params_.min_p;
  r.u = philox_uniform(seed_, sample_index_, static_cast<std::uint64_t>(generated_));
  if (params_.top_k > 0 && params_.top_k < vocab) {
    r.mode = DeviceSampleMode::kTopK;
    r.top_k = params_.top_k;
  } else {
    r.mode = truncates(params_) ? DeviceSampleMode::kFloor : DeviceSampleMode::kFull;
    if (params_.typical_p < 1.0f) r.flags = kTypicalP;
  }
  if (params_.tfs_z < 1.0f || params_.mirostat != 0) {
    // The whole distribution (or the top-k set) goes to the host: no top-p/min-p floor.
    r.flags |= kHostFinish;
    r.top_p = 1.0f;
    r.min_p = 0.0f;
  }
  return r;
}

Result<SampledToken> SequenceSampler::finish_device(const DeviceSampleResult& result,
                                                    std::span<const DeviceCandidate> candidates,
                                                    std::span<const DeviceCandidate> top,
                                                    std::span<float> host_row) {
  if (result.status == DeviceSampleStatus::kNoneAllowed) {
    return row_error(ErrorCode::kInvalidArgument,
                     "the allowed-token bitmask allows none of the tokens (at least one must "
                     "be allowed)");
  }
  if (result.status == DeviceSampleStatus::kHostRow) {
    if (host_row.empty()) {
      return row_error(ErrorCode::kInternal, "the device asked for a host row it did not send");
    }
    return try_sample(host_row, nullptr);
  }
  const double log_z = result.raw_max + std::log(result.raw_sum);
  SampledToken out{result.token, 0.0f, {}};
  double surprise = std::numeric_limits<double>::quiet_NaN();
  float chosen_raw = result.chosen_raw;
  if (result.candidates > 0 || result.token < 0) {
    // top-k or the top-p/min-p floor: finish on the candidates as choose() does.
    if (result.candidates <= 0 || result.offset < 0 ||
        static_cast<std::size_t>(result.offset) + static_cast<std::size_t>(result.candidates) >
            candidates.size()) {
      return row_error(ErrorCode::kInternal, "the device returned no candidates to draw from");
    }
    candidates = candidates.subspan(static_cast<std::size_t>(result.offset),
                                    static_cast<std::size_t>(result.candidates));
    Scratch& s = scratch();
    s.candidates.clear();
    for (const auto& c : candidates)
      s.candidates.push_back({0.0f, c.weight, c.id});
    if (fsd_step()) {
      out.id = fsd_choose(s.candidates, *anti_lm_, params_);
    } else {
      truncate(s.candidates, result.total, params_);
      std::tie(out.id, surprise) = draw_candidates(
          s.candidates,
          philox_uniform(seed_, sample_index_, static_cast<std::uint64_t>(generated_)), vocab_);
    }
    chosen_raw = 0.0f;
    for (int k = 0; k < result.candidates; ++k) {
      if (candidates[static_cast<std::size_t>(k)].id == out.id) {
        chosen_raw = candidates[static_cast<std::size_t>(k)].raw;
        break;
      }
    }
  }
  out.logprob = static_cast<float>(chosen_raw - log_z);
  if (params_.logprobs > 0) {
    const auto n =
        std::min<std::size_t>(static_cast<std::size_t>(std::max(result.top, 0)), top.size());
    std::vector<TokenLogprob> entries;
    entries.reserve(n);
    for (std::size_t k = 0; k < n; ++k)
      entries.push_back({top[k].id, top[k].raw});
    std::sort(entries.begin(), entries.end(), [](const TokenLogprob& a, const TokenLogprob& b) {
      return a.logprob != b.logprob ? a.logprob > b.logprob : a.id < b.id;
    });
    if (entries.size() > static_cast<std::size_t>(params_.logprobs)) {
      entries.resize(static_cast<std::size_t>(params_.logprobs));
    }
    for (auto& t : entries)
      t.logprob = static_cast<float>(t.logprob - log_z);
    out.top = std::move(entries);
  }
  record(out.id);
  update_mirostat(surprise);
  return out;
}

}  // namespace weft::sampling
