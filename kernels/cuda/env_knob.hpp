#pragma once
// The decode attention kernels' tuning knobs from the environment (WEFT_DECODE_STAGES,
// WEFT_DECODE_STREAM_SEGMENT_KEYS, ...). Host code; included by .cu files.

#include <cstdio>
#include <cstdlib>

namespace weft::cuda::detail {

// The environment variable `name` as a non-negative integer up to 2^20; `fallback` when it is
// unset or empty, and, with a line on stderr naming it, when it is not such an integer.
inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* rest = nullptr;
  const long n = std::strtol(v, &rest, 10);
  if (*rest != '\0' || n < 0 || n > 1 << 20) {
    std::fprintf(stderr, "weft: ignoring %s=%s (expected a non-negative integer)\n", name, v);
    return fallback;
  }
  return static_cast<int>(n);
}

}  // namespace weft::cuda::detail
