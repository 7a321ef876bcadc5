#pragma once
// Files that ship in the source tree (config/models, models/weft-tiny) as a binary finds them:
// in the source tree it was built from, else in the folders above the executable, so that a
// build tree copied or moved elsewhere with its sources (a GPU machine's copy of the work tree,
// where the compiled-in path does not exist) still finds them.

#include <filesystem>

namespace weft {

// `relative` (e.g. "config/models") under the source tree this was built from when it is
// there; else under the nearest folder above the running executable that holds it; else under
// the source tree, so that an error names the path that was expected.
std::filesystem::path bundled_path(const std::filesystem::path& relative);

// The search itself, with its inputs given: for tests.
std::filesystem::path find_bundled_path(const std::filesystem::path& relative,
                                        const std::filesystem::path& source_dir,
                                        const std::filesystem::path& executable);

}  // namespace weft
