#include "loaders/bundled_path.hpp"

namespace weft {

std::filesystem::path find_bundled_path(const std::filesystem::path& relative,
                                        const std::filesystem::path& source_dir,
                                        const std::filesystem::path& executable) {
  std::error_code ec;
  if (std::filesystem::exists(source_dir / relative, ec)) return source_dir / relative;
  if (!executable.empty()) {
    for (auto dir = executable.parent_path(); !dir.empty(); dir = dir.parent_path()) {
      if (std::filesystem::exists(dir / relative, ec)) return dir / relative;
      if (dir == dir.root_path()) break;
    }
  }
  return source_dir / relative;
}

std::filesystem::path bundled_path(const std::filesystem::path& relative) {
  std::error_code ec;
  // Linux names the running executable here; elsewhere the walk is skipped.
  const auto executable = std::filesystem::read_symlink("/proc/self/exe", ec);
  // WEFT_SOURCE_DIR (set by loaders/CMakeLists.txt) is the source tree this was built from.
  return find_bundled_path(relative, WEFT_SOURCE_DIR, ec ? std::filesystem::path() : executable);
}

}  // namespace weft
