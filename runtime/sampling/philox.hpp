#pragma once
// Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3",
// SC 2011), the counter-based generator of cuRAND and PyTorch. A draw is a pure function of
// (key, counter), so a sequence's n-th token gets the same random number whatever else ran in
// the batch or in which order the sampler served sequences; a CUDA sampler can reproduce it.

#include <array>
#include <cstdint>

namespace weft::sampling {

using PhiloxCounter = std::array<std::uint32_t, 4>;
using PhiloxKey = std::array<std::uint32_t, 2>;

constexpr PhiloxCounter philox4x32_10(PhiloxCounter ctr, PhiloxKey key) noexcept {
  constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // golden ratio, sqrt(3) - 1
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kM0) * ctr[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kM1) * ctr[2];
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
    key[0] += kW0;
    key[1] += kW1;
  }
  return ctr;
}

// The uniform double in [0, 1) that the token at `step` of sample `sample_index` draws from a
// request keyed by `seed`: 53 random bits, so every representable value is equally likely.
inline double philox_uniform(std::uint64_t seed, std::uint32_t sample_index,
                             std::uint64_t step) noexcept {
  const PhiloxKey key = {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
  const PhiloxCounter ctr = {static_cast<std::uint32_t>(step),
                             static_cast<std::uint32_t>(step >> 32), sample_index, 0};
  const PhiloxCounter out = philox4x32_10(ctr, key);
  const std::uint64_t bits = (static_cast<std::uint64_t>(out[0]) << 32 | out[1]) >> 11;
  return static_cast<double>(bits) * 0x1.0p-53;
}

}  // namespace weft::sampling
