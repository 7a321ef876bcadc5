#include "runtime/sampling/sampling_params.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace weft::sampling {
namespace {

// Floats print in their shortest readable form ("1.5", "nan", "-inf") so the message shows
// what the caller sent.
std::string show(float value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

Error outside(std::string_view field, const std::string& value, std::string_view range) {
  std::string message(field);
  message += ": ";
  message += value;
  message += " is outside ";
  message += range;
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}

Error outside(std::string_view field, float value, std::string_view range) {
  return outside(field, show(value), range);
}

// NaN fails every comparison, so each check is written as "inside" and negated.
bool in_closed(float v, float lo, float hi) {
  return v >= lo && v <= hi;
}
bool in_left_open(float v, float lo, float hi) {
  return v > lo && v <= hi;
}

// FSD's and beam search's fields, and what they cannot be combined with.
Result<void> validate_fsd_and_beam(const SamplingParams& p) {
  if (p.fsd_pool_size < 1 || p.fsd_pool_size > 1000) {
    return outside("fsd_pool_size", std::to_string(p.fsd_pool_size), "[1, 1000]");
  }
  if (p.fsd_k < 1 || p.fsd_k > p.fsd_pool_size) {
    return outside("fsd_k", std::to_string(p.fsd_k),
                   "[1, fsd_pool_size = " + std::to_string(p.fsd_pool_size) + "]");
  }
  if (!in_closed(p.fsd_alpha, 0.0f, 1.0f)) {
    return outside("fsd_alpha", p.fsd_alpha, "[0, 1]");
  }
  if (p.fsd_n < 1 || p.fsd_n > 8) {
    return outside("fsd_n", std::to_string(p.fsd_n), "[1, 8]");
  }
  if (!in_closed(p.fsd_beta, 0.0f, 1.0f)) {
    return outside("fsd_beta", p.fsd_beta, "[0, 1]");
  }
  if (p.fsd_random_steps < 0) {
    return outside("fsd_random_steps", std::to_string(p.fsd_random_steps), "[0, inf)");
  }
  if (!in_closed(p.fsd_random_prob, 0.0f, 1.0f)) {
    return outside("fsd_random_prob", p.fsd_random_prob, "[0, 1]");
  }
  if (p.fsd != Fsd::kOff) {
    const bool plain = p.fsd == Fsd::kFsd;
    const char* other = p.mirostat != 0               ? "mirostat"
                        : plain && p.top_k > 0        ? "top_k"
                        : plain && p.top_p < 1.0f     ? "top_p"
                        : plain && p.min_p > 0.0f     ? "min_p"
                        : plain && p.typical_p < 1.0f ? "typical_p"
                        : plain && p.tfs_z < 1.0f     ? "tfs_z"
                                                      : nullptr;
    if (other != nullptr) {
      return Error(ErrorCode::kInvalidArgument,
                   std::string("fsd: cannot be combined with ") + other +
                       " (FSD chooses among its own fsd_k candidates; turn " + other + " off)");
    }
  }
  if (p.beam_width < 1 || p.beam_width > SamplingParams::kMaxBeamWidth) {
    return outside("beam_width", std::to_string(p.beam_width), "[1, 16] (1 is off)");
  }
  if (!in_closed(p.length_penalty, -10.0f, 10.0f)) {
    return outside("length_penalty", p.length_penalty, "[-10, 10]");
  }
  if (p.beam_width > 1) {
    if (p.n > p.beam_width) {
      return Error(ErrorCode::kInvalidArgument,
                   "n: " + std::to_string(p.n) + " is more than beam_width " +
                       std::to_string(p.beam_width) + " (beam search returns the n best beams)");
    }
    const char* other = p.fsd != Fsd::kOff ? "fsd"
                        : p.mirostat != 0  ? "mirostat"
                        : truncates(p)     ? "top_k/top_p/min_p/typical_p/tfs_z"
                        : p.logprobs > 0   ? "top_logprobs"
                                           : nullptr;
    if (other != nullptr) {
      return Error(ErrorCode::kInvalidArgument,
                   std::string("beam_width: cannot be combined with ") + other +
                       " (beam search ranks whole sequences by their log-probability)");
    }
  }
  return {};
}

}  // namespace

bool truncates(const SamplingParams& params) {
  return params.top_k > 0 || params.top_p < 1.0f || params.min_p > 0.0f ||
         params.typical_p < 1.0f || params.tfs_z < 1.0f || params.mirostat != 0;
}

Result<void> validate(const SamplingParams& p, int vocab_size) {
  if (vocab_size <= 0) {
    return outside("vocab_size", std::to_string(vocab_size), "[1, inf)");
  }
  const std::string id_range = "[0, " + std::to_string(vocab_size) + ")";
  if (!(p.temperature >= 0.0f && std::isfinite(p.temperature))) {
    return outside("temperature", p.temperature, "[0, inf) (0 is greedy)");
  }
  if (p.top_k < -1) {
    return outside("top_k", std::to_string(p.top_k), "[-1, inf) (-1 and 0 turn it off)");
  }
  if (!in_left_open(p.top_p, 0.0f, 1.0f)) {
    return outside("top_p", p.top_p, "(0, 1]");
  }
  if (!in_closed(p.min_p, 0.0f, 1.0f)) {
    return outside("min_p", p.min_p, "[0, 1]");
  }
  if (!in_left_open(p.typical_p, 0.0f, 1.0f)) {
    return outside("typical_p", p.typical_p, "(0, 1]");
  }
  if (!in_left_open(p.tfs_z, 0.0f, 1.0f)) {
    return outside("tfs_z", p.tfs_z, "(0, 1]");
  }
  if (p.mirostat < 0 || p.mirostat > 2) {
    return outside("mirostat", std::to_string(p.mirostat), "{0, 1, 2} (0 is off)");
  }
  if (!in_left_open(p.mirostat_tau, 0.0f, 100.0f)) {
    return outside("mirostat_tau", p.mirostat_tau, "(0, 100]");
  }
  if (!in_left_open(p.mirostat_eta, 0.0f, 1.0f)) {
    return outside("mirostat_eta", p.mirostat_eta, "(0, 1]");
  }
  if (p.mirostat != 0) {
    const char* other = p.top_k > 0          ? "top_k"
                        : p.top_p < 1.0f     ? "top_p"
                        : p.min_p > 0.0f     ? "min_p"
                        : p.typical_p < 1.0f ? "typical_p"
                        : p.tfs_z < 1.0f     ? "tfs_z"
                                             : nullptr;
    if (other != nullptr) {
      return Error(ErrorCode::kInvalidArgument,
                   std::string("mirostat: cannot be combined with ") + other +
                       " (mirostat sets its own truncation; turn " + other + " off)");
    }
  }
  if (auto fsd = validate_fsd_and_beam(p); !fsd) {
    return fsd;
  }
  if (!p.speculate.empty() && p.speculate != "off" && p.speculate != "prompt-lookup" &&
      p.speculate != "draft") {
    return Error(ErrorCode::kInvalidArgument, "speculation.method: \"" + p.speculate +
                                                  "\" is not one of off, prompt-lookup, draft");
  }
  if (p.spec_tokens < 0 || p.spec_tokens > SamplingParams::kMaxSpecTokens) {
    return outside("speculation.tokens", std::to_string(p.spec_tokens),
                   "[0, 64] (0: the engine's)");
  }
  if (!(p.repetition_penalty > 0.0f && std::isfinite(p.repetition_penalty))) {
    return outside("repetition_penalty", p.repetition_penalty, "(0, inf) (1 is off)");
  }
  constexpr float kPenalty = SamplingParams::kMaxAbsPresenceOrFrequency;
  if (!in_closed(p.presence_penalty, -kPenalty, kPenalty)) {
    return outside("presence_penalty", p.presence_penalty, "[-2, 2]");
  }
  if (!in_closed(p.frequency_penalty, -kPenalty, kPenalty)) {
    return outside("frequency_penalty", p.frequency_penalty, "[-2, 2]");
  }
  std::vector<std::int32_t> biased;
  biased.reserve(p.logit_bias.size());
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0 || id >= vocab_size) {
      return outside("logit_bias: token id", std::to_string(id), id_range);
    }
    constexpr float kBias = SamplingParams::kMaxAbsLogitBias;
    if (!in_closed(bias, -kBias, kBias)) {
      return outside("logit_bias: bias of token " + std::to_string(id), bias, "[-100, 100]");
    }
    biased.push_back(id);
  }
  // A JSON object cannot repeat a key; a repeated id here would silently add its biases.
  std::sort(biased.begin(), biased.end());
  if (auto dup = std::adjacent_find(biased.begin(), biased.end()); dup != biased.end()) {
    return Error(ErrorCode::kInvalidArgument,
                 "logit_bias: token id " + std::to_string(*dup) + " appears more than once");
  }
  if (p.n < 1 || p.n > SamplingParams::kMaxN) {
    return outside("n", std::to_string(p.n), "[1, 128]");
  }
  if (p.max_tokens < 1) {
    return outside("max_tokens", std::to_string(p.max_tokens), "[1, inf)");
  }
  for (const auto id : p.stop_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return outside("stop_token_ids: token id", std::to_string(id), id_range);
    }
  }
  if (p.stop.size() > SamplingParams::kMaxStopStrings) {
    return outside("stop: count", std::to_string(p.stop.size()), "[0, 16]");
  }
  for (std::size_t i = 0; i < p.stop.size(); ++i) {
    if (p.stop[i].empty()) {
      return Error(ErrorCode::kInvalidArgument, "stop[" + std::to_string(i) +
                                                    "]: an empty stop string is not allowed "
                                                    "(each must have length in [1, inf))");
    }
  }
  if (p.logprobs < 0 || p.logprobs > SamplingParams::kMaxLogprobs) {
    return outside("logprobs", std::to_string(p.logprobs), "[0, 20]");
  }
  return {};
}

}  // namespace weft::sampling
