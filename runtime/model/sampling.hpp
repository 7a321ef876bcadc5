#pragma once
// Picking the next token from one row of logits: greedy or temperature sampling, with the
// log-probabilities `weft generate --top-logprobs` reports. The engine's sampler actor will
// grow penalties, top-k/p and bitmasks; this is the plain core it can reuse.

#include <cstdint>
#include <random>
#include <vector>

namespace weft::model {

struct TokenLogprob {
  int id = 0;
  float logprob = 0.0f;
};

struct TokenChoice {
  int id = 0;
  float logprob = 0.0f;           // of the model's distribution (before temperature)
  std::vector<TokenLogprob> top;  // the top_logprobs most likely, most likely first
};

// temperature <= 0: argmax (lowest id on ties). Otherwise samples softmax(logits / T) with
// `rng`, so a fixed seed gives a fixed continuation.
TokenChoice choose_token(const float* logits, int vocab, float temperature, int top_logprobs,
                         std::mt19937_64& rng);

}  // namespace weft::model
