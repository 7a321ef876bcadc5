#include <iostream>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/vector_math.hpp"
#include "tools/weft/commands.hpp"
#include "weft/build_info.hpp"
#ifdef WEFT_HAVE_CUDA
#include "kernels/cuda/device_info.hpp"
#endif

namespace weft::cli {
namespace {

void print_version() {
  const BuildInfo& info = build_info();
  std::cout << "weft " << info.version << '\n';
  std::cout << "build type: " << info.build_type << " (" << info.compiler;
  if (!info.sanitize.empty()) std::cout << ", sanitize=" << info.sanitize;
  std::cout << ")\n";
  std::cout << "cpu: " << cpu::describe(cpu::cpu_features()) << ", "
            << cpu::cpu_features().logical_cores << " logical cores\n";
  const cpu::KernelPath path = cpu::resolve(cpu::KernelPath::kAuto);
  std::cout << "cpu kernels: " << cpu::kernel_path_name(path)
            << (path == cpu::KernelPath::kAvx512
                    ? " (the quantized one-token products; AVX2 elsewhere; WEFT_CPU_AVX512=0: avx2)"
                    : "")
            << '\n';
#ifdef WEFT_HAVE_CUDA
  auto list = cuda::visible_devices();
  std::cout << "CUDA: compiled in (runtime " << list.runtime_version / 1000 << '.'
            << (list.runtime_version % 1000) / 10 << ", sm_" << info.cuda_architectures << ")\n";
  if (list.devices.empty()) {
    std::cout << "GPUs: none visible (" << list.unavailable_reason << ")\n";
  } else {
    std::cout << "GPUs: " << list.devices.size() << " visible\n";
    for (const auto& d : list.devices) {
      std::cout << "  cuda:" << d.index << "  " << d.name << "  sm_" << d.compute_major
                << d.compute_minor << "  " << d.total_memory_bytes / (1024 * 1024) << " MiB  "
                << d.multiprocessors << " SMs\n";
    }
  }
#else
  std::cout << "CUDA: not compiled in (configured with WEFT_CUDA=OFF or no nvcc found)\n";
#endif
}

}  // namespace

void add_version_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "version",
      "Print the version, build type, CPU features, and whether CUDA is compiled in "
      "and which GPUs are visible.");
  cmd->callback([&exit_code] {
    print_version();
    exit_code = 0;
  });
}

}  // namespace weft::cli
