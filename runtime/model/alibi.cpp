#include "runtime/model/alibi.hpp"

#include <cmath>

namespace weft::model {

std::vector<float> alibi_slopes(int num_heads) {
  std::vector<float> out;
  if (num_heads <= 0) return out;
  int power = 1;
  while (power * 2 <= num_heads)
    power *= 2;
  // base = 2^(-(2^-(log2(power) - 3))) = 2^(-8 / power)
  const auto base = static_cast<float>(std::pow(2.0, -8.0 / power));
  for (int i = 1; i <= power; ++i)
    out.push_back(std::pow(base, static_cast<float>(i)));
  if (power != num_heads) {
    const auto extra_base = static_cast<float>(std::pow(2.0, -4.0 / power));  // -8 / (2 power)
    const int remaining = num_heads - power;
    for (int i = 1; i < 1 + 2 * remaining; i += 2)
      out.push_back(std::pow(extra_base, static_cast<float>(i)));
  }
  return out;
}

}  // namespace weft::model
