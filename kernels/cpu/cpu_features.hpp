#pragma once
// What the CPU we run on can do, read once at run time so one binary picks the AVX2/FMA
// kernels where they exist and the scalar ones elsewhere.

#include <string>

namespace weft::cpu {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  unsigned logical_cores = 1;
};

const CpuFeatures& cpu_features() noexcept;

// "avx2 fma f16c" or "scalar", for `weft version` and benchmark headers.
std::string describe(const CpuFeatures& features);

}  // namespace weft::cpu
