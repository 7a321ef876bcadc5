#pragma once
// What a request asks of the sampler, with the names and ranges of the OpenAI API and vLLM's
// SamplingParams, and the check that runs before a request is admitted. docs/sampling.md
// describes each field and the order in which SequenceSampler applies them.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "weft/error.hpp"

namespace weft::sampling {

// Inferflow's FSD strategies (runtime/sampling/fsd.hpp): off, Frustratingly Simple Decoding,
// or randomized FSD.
enum class Fsd : std::uint8_t { kOff, kFsd, kRandomized };

struct SamplingParams {
  float temperature = 1.0f;  // [0, inf); 0: greedy (argmax, lowest id on ties)
  int top_k = 0;             // 0 or -1: off; otherwise keep the k most likely (ties kept)
  float top_p = 1.0f;        // (0, 1]; 1: off
  float min_p = 0.0f;        // [0, 1]; 0: off
  float typical_p = 1.0f;    // (0, 1]; 1: off
  float tfs_z = 1.0f;        // tail-free sampling (Phillips 2019), (0, 1]; 1: off
  // Mirostat (Basu et al. 2021): 0 off, 1 (Zipf-estimated top-k) or 2 (surprise threshold).
  // It sets its own truncation, so top_k, top_p, min_p, typical_p and tfs_z must be off.
  int mirostat = 0;
  float mirostat_tau = 5.0f;  // target surprise in bits, (0, 100]
  float mirostat_eta = 0.1f;  // learning rate, (0, 1]
  // FSD (fsd.hpp), with Inferflow's defaults. Plain FSD sets its own choice, so the
  // truncations and mirostat must be off; randomized FSD's sampling steps use them.
  Fsd fsd = Fsd::kOff;
  int fsd_k = 6;                 // tokens scored, [1, fsd_pool_size]
  float fsd_alpha = 0.5f;        // weight of the anti-LM, [0, 1]
  int fsd_n = 3;                 // the anti-LM's n-gram order, [1, 8]
  float fsd_beta = 0.9f;         // the anti-LM's back-off weight, [0, 1]
  int fsd_pool_size = 50;        // tokens P_theta is normalised over, [1, 1000]
  int fsd_random_steps = 10;     // randomized FSD: the first output tokens that may sample
  float fsd_random_prob = 0.5f;  // randomized FSD: the chance each of them samples, [0, 1]
  // Beam search (runtime/sampling/beam_search.hpp): 1 is off; n <= beam_width best beams
  // are returned. Deterministic: temperature is not used; no truncation, mirostat or FSD.
  int beam_width = 1;               // [1, 16]
  float length_penalty = 1.0f;      // score = sum of logprobs / length^length_penalty, [-10, 10]
  float repetition_penalty = 1.0f;  // (0, inf); HF/vLLM semantics over prompt + output tokens
  float presence_penalty = 0.0f;    // [-2, 2], OpenAI semantics over output tokens
  float frequency_penalty = 0.0f;   // [-2, 2]
  std::vector<std::pair<std::int32_t, float>> logit_bias;  // id -> bias in [-100, 100]
  std::optional<std::uint64_t> seed;                       // none: the engine picks one per request
  int n = 1;                                               // samples sharing the prompt, [1, 128]
  int max_tokens = 16;  // >= 1 (the engine also bounds it by the context)
  std::vector<std::int32_t> stop_token_ids;
  // Matched by the detokenizer (runtime/text/stop_strings.hpp); only validated here.
  std::vector<std::string> stop;  // at most 16, none empty
  bool ignore_eos = false;
  int logprobs = 0;  // top-k logprobs per token, [0, 20]; the chosen token's is always reported
  // Speculative decoding for this request (docs/speculative.md#per-request), on an engine
  // started with a speculator: speculate "" (the engine's choice: on where the request allows
  // it), "off", or the engine's method by name ("prompt-lookup" or "draft"; the engine refuses
  // a method it was not started with); spec_tokens 0 (the engine's depth) or at most this many
  // draft tokens on a path, [0, 64] (the engine's --spec-tokens caps it).
  std::string speculate;
  int spec_tokens = 0;

  static constexpr int kMaxN = 128;
  static constexpr int kMaxBeamWidth = 16;
  static constexpr int kMaxLogprobs = 20;
  static constexpr int kMaxSpecTokens = 64;
  static constexpr std::size_t kMaxStopStrings = 16;
  static constexpr float kMaxAbsLogitBias = 100.0f;
  static constexpr float kMaxAbsPresenceOrFrequency = 2.0f;
};

// True when top-k, top-p, min-p, typical-p, tail-free sampling or mirostat would remove
// tokens.
bool truncates(const SamplingParams& params);

// Checks every field; the first invalid one gives an kInvalidArgument error that names the
// field, the value and the allowed range, e.g. "top_p: 1.5 is outside (0, 1]". `vocab_size`
// bounds the ids of logit_bias and stop_token_ids.
Result<void> validate(const SamplingParams& params, int vocab_size);

}  // namespace weft::sampling
