#pragma once
// What this binary is: filled in by CMake at configure time.

#include <string_view>

namespace weft {

struct BuildInfo {
  std::string_view version;     // e.g. "0.1.0"
  std::string_view build_type;  // Release, Debug, RelWithDebInfo, ...
  std::string_view compiler;    // e.g. "GNU 12.2.0"
  std::string_view sanitize;    // "", "address" or "thread"
  bool cuda_compiled;           // whether the CUDA backend was built in
  std::string_view cuda_architectures;
};

const BuildInfo& build_info() noexcept;

}  // namespace weft
