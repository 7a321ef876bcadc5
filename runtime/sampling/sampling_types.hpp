#pragma once
// The plain values the sampler returns.

#include <cstdint>
#include <vector>

namespace weft::sampling {

struct TokenLogprob {
  std::int32_t id;
  float logprob;
};

struct SampledToken {
  std::int32_t id;
  float logprob;                  // of the raw distribution (see sequence_sampler.hpp)
  std::vector<TokenLogprob> top;  // the `logprobs` most likely raw tokens, most likely first
};

}  // namespace weft::sampling
