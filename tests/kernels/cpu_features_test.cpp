#include "kernels/cpu/cpu_features.hpp"

#include <gtest/gtest.h>

namespace weft::cpu {
namespace {

TEST(CpuFeatures, DescribesWhatWasDetected) {
  CpuFeatures none;
  EXPECT_EQ(describe(none), "scalar");
  CpuFeatures some;
  some.avx2 = true;
  some.fma = true;
  EXPECT_EQ(describe(some), "avx2 fma");
  EXPECT_GE(cpu_features().logical_cores, 1u);
}

TEST(CpuFeatures, DetectedOncePerProcess) {
  // The same object is returned every time: detection happens once per process.
  EXPECT_EQ(&cpu_features(), &cpu_features());
}

}  // namespace
}  // namespace weft::cpu
