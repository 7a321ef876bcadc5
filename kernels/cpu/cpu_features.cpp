#include "kernels/cpu/cpu_features.hpp"

#include <thread>

namespace weft::cpu {

const CpuFeatures& cpu_features() noexcept {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    f.f16c = __builtin_cpu_supports("f16c");
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
