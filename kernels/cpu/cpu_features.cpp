#include "kernels/cpu/cpu_features.hpp"

#include <thread>

#if defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
#endif

namespace weft::cpu {

const CpuFeatures& cpu_features() noexcept {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
#if defined(__clang__)
    // clang 14's __builtin_cpu_supports does not know "f16c": read CPUID leaf 1 (ECX bit 29).
    // AVX2 stands for the OS saving the YMM registers, which F16C's instructions use.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    f.f16c = f.avx2 && __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
#else
    f.f16c = __builtin_cpu_supports("f16c");
#endif
    f.avx512f = __builtin_cpu_supports("avx512f");
#endif
    f.logical_cores = std::max(1u, std::thread::hardware_concurrency());
    return f;
  }();
  return features;
}

std::string describe(const CpuFeatures& f) {
  std::string out;
  auto add = [&out](bool on, const char* name) {
    if (!on) return;
    if (!out.empty()) out += ' ';
    out += name;
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx512f, "avx512f");
  return out.empty() ? "scalar" : out;
}

}  // namespace weft::cpu
