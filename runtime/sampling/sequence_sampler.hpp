#pragma once
// One sequence's sampler: from a row of logits to the next token, with the sequence's RNG and
// the token counts its penalties need. A plain class without threads; the sampler actor owns
// one per running sequence (n per request).
//
// Order of operations in sample(), each step on the output of the one before:
//   1. allowed-token bitmask (constrained decoding): disallowed tokens get -inf.
//   2. logit_bias: logit += bias (OpenAI).
//   3. repetition_penalty over the distinct tokens of prompt + output: positive logits are
//      divided by it, negative ones multiplied (Keskar et al. 2019; HF, vLLM).
//   4. presence/frequency penalties over the output tokens:
//      logit -= count * frequency_penalty + (count > 0) * presence_penalty (OpenAI).
//   -> logprobs are reported from the log-softmax of the row after step 1 and before step 2,
//      the "raw" logprobs vLLM returns by default (logprobs_mode=raw_logprobs; its grammar
//      bitmask is applied before its sampler runs). Temperature, penalties and truncation do
//      not change them.
//   5. temperature: 0 is greedy — argmax of the row after step 4, lowest id on ties, no
//      random draw and no truncation (vLLM's rule); otherwise logits / temperature.
//   6. top-k: keep the tokens whose logit is >= the k-th largest (ties at the edge kept).
//   7. top-p: the shortest most-likely-first prefix with probability >= top_p.
//   8. min-p: keep p >= min_p * p_max.
//   6b. tail-free sampling (tfs_z < 1; Phillips 2019, as llama.cpp orders it: after top-k,
//      before top-p) on the whole top-k set.
//   9. typical-p (Meister et al. 2023): the shortest prefix by |-log p - H| with mass >=
//      typical_p. Steps 6-9 follow HF's warper order, each on the renormalised survivors (vLLM
//      v1 applies min-p before top-k/top-p and has no typical-p).
//   9b. mirostat (1 or 2; alone, instead of steps 6-9): truncation at the sequence's target
//      surprise mu (truncation.hpp), which starts at 2 * mirostat_tau and after each sampled
//      token moves by -mirostat_eta * (surprise - mirostat_tau), the surprise being
//      -log2 of the token's probability among the kept tokens. Tokens appended without
//      sampling (accept()) leave mu as it is.
//   9c. FSD (fsd.hpp; instead of steps 5-10 at the steps it chooses): the best FSD score among
//      the fsd_k most likely tokens, deterministic. Randomized FSD runs steps 5-10 instead at
//      the steps fsd_samples_at() picks.
//  10. draw one token by inverse CDF with a uniform from Philox4x32-10 keyed by the seed at
//      counter (sample_index, step): the same request and seed give the same tokens whatever
//      else is in the batch, and the n samples of one request differ.
// Ties inside top-p and typical-p are broken towards the lower id so the result is a
// function of the logits alone.

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "runtime/sampling/device_sampling.hpp"
#include "runtime/sampling/fsd.hpp"
#include "runtime/sampling/sampling_params.hpp"
#include "runtime/sampling/sampling_types.hpp"
#include "runtime/sampling/token_history.hpp"
#include "weft/error.hpp"

namespace weft::sampling {

struct Candidate;  // runtime/sampling/truncation.hpp

class SequenceSampler {
 public:
  // `params` must have passed validate() for the model's vocabulary. `seed` is the request's
  // seed (params.seed, or one the engine drew for it); `sample_index` is which of the n
  // samples this sequence is.
  SequenceSampler(const SamplingParams& params, std::span<const std::int32_t> prompt,
                  std::uint64_t seed, int sample_index = 0);

  // Samples from one row of logits (modified in place as scratch; on return it holds the raw
  // row after the bitmask). `allowed`: optional bitmask of ceil(vocab / 32) words, bit i of
  // word i / 32 set = token i allowed. Records the token for the penalties and advances the
  // step. Throws weft::Error (see try_sample) on a row it cannot sample from.
  SampledToken sample(std::span<float> logits, const std::uint32_t* allowed = nullptr);

  // The same, returning the error instead: the bitmask allows no token, every allowed logit
  // is -inf, a logit is NaN or +inf (kInternal: the model is broken), or a prompt/accepted
  // token id lies outside the row. On error nothing is recorded.
  Result<SampledToken> try_sample(std::span<float> logits, const std::uint32_t* allowed = nullptr);

  // The distribution step 10 would draw from (after steps 1-9), as (id, probability) with the
  // probabilities summing to 1; greedy gives its one token with probability 1. Records
  // nothing. For tests and debugging; costs about as much as a sample.
  Result<std::vector<TokenLogprob>> distribution(std::span<float> logits,
                                                 const std::uint32_t* allowed = nullptr);

  // Sampling on a device (runtime/sampling/device_sampling.hpp), in two halves around the
  // device's pass: device_row() describes the next draw (mode, temperature, truncation
  // inputs, the uniform of step 10) and appends the row's bias and penalty edits; the
  // caller sets its logits row and bitmask offset. finish_device() completes the draw from
  // the device's result as try_sample() would from the row (top-p, min-p and typical-p over
  // the candidates, the draw, logprobs) and records the token. `host_row` is the raw row the
  // device hands back when it asks the host to sample (kHostRow); try_sample() then runs on
  // it, giving the CPU path's result or error. `candidates` is the step's whole pool (the
  // row's are at result.offset); `top` the row's kDeviceTopEntries.
  Result<DeviceSampleRow> device_row(int vocab, std::vector<DeviceSampleEdit>& edits) const;
  Result<SampledToken> finish_device(const DeviceSampleResult& result,
                                     std::span<const DeviceCandidate> candidates,
                                     std::span<const DeviceCandidate> top,
                                     std::span<float> host_row);

  // Beam search (beam_search.hpp; sequence_sampler_beam.cpp): the `k` most likely tokens of
  // the row after steps 1-4 (bitmask, bias, penalties), with their log-softmax at temperature
  // 1 over that whole row, most likely first (lower id on ties). Records nothing: the beam's
  // token is recorded with accept() once the search has chosen it. Errors as try_sample's.
  Result<std::vector<TokenLogprob>> beam_candidates(std::span<float> logits,
                                                    const std::uint32_t* allowed, int k);
  // The same on a device: the row's description (the device collects every token of nonzero
  // weight, or hands back the raw row), and the result from the device's candidates or raw row.
  Result<DeviceSampleRow> beam_device_row(int vocab, std::vector<DeviceSampleEdit>& edits) const;
  Result<std::vector<TokenLogprob>> finish_beam_device(const DeviceSampleResult& result,
                                                       std::span<const DeviceCandidate> candidates,
                                                       std::span<float> host_row, int k);

  // A token appended without sampling (jump-forward decoding, or a replayed token after a
  // preemption): counted for the penalties and advances the step counter, so the tokens that
  // follow are drawn as if it had been sampled.
  void accept(std::int32_t token);

  // Tokens sampled or accepted so far; also the step counter of the next draw.
  int generated() const { return generated_; }
  const SamplingParams& params() const { return params_; }
  std::uint64_t seed() const { return seed_; }
  int sample_index() const { return static_cast<int>(sample_index_); }

 private:
  struct Choice;
  Result<Choice> choose(std::span<float> logits, const std::uint32_t* allowed,
                        std::vector<TokenLogprob>* distribution_out);

  // The draw over truncated candidates shared by choose() and finish_device(): mirostat's
  // truncation when it is on, then the inverse CDF at u. Returns the token and its surprise
  // in bits among the kept candidates (mirostat only; NaN otherwise).
  std::pair<std::int32_t, double> draw_candidates(std::vector<Candidate>& c, double u,
                                                  int vocab) const;
  void update_mirostat(double surprise);
  // The token becomes part of the sequence: penalties, the anti-LM, the step counter.
  void record(std::int32_t token);
  // Whether the next token is FSD's choice (FSD on, and not a sampling step of randomized FSD).
  bool fsd_step() const;

  SamplingParams params_;
  double mirostat_mu_;     // mirostat's target surprise (bits), 2 * tau at first
  mutable int vocab_ = 0;  // the row width device_row() saw, for mirostat 1 on the device path
  std::uint64_t seed_;
  std::uint32_t sample_index_;
  int generated_ = 0;
  TokenHistory history_;
  std::optional<AntiLm> anti_lm_;  // with FSD on
  LogitUndoLog undo_;              // reused between steps
};

}  // namespace weft::sampling
