#pragma once
// Numerically stable softmax and log-softmax over one row (max subtracted first).

#include <cstddef>

namespace weft::cpu {

// x[i] = exp(x[i] - max) / sum
void softmax_inplace(float* x, std::size_t n) noexcept;

// out[i] = x[i] - max - log(sum exp(x - max)); summed in double so long vocabularies keep
// their small log-probabilities accurate.
void log_softmax(const float* x, std::size_t n, float* out) noexcept;

}  // namespace weft::cpu
