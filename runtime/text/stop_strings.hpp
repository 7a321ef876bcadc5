#pragma once
// Stop strings over streamed text: finds the earliest stop string even when it spans several
// deltas, and withholds it (and everything after it) from the output. Text that could still
// be the start of a stop string is held back until the next delta decides.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weft::text {

class StopStringMatcher {
 public:
  // Empty strings are ignored (they would stop before any text).
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  struct Output {
    std::string text;                    // safe to show now
    std::optional<std::size_t> stopped;  // index of the stop string found, if any
  };

  // Feeds the next delta (valid UTF-8). After a stop, further input is ignored.
  Output push(std::string_view delta);
  // End of generation without a stop: the held-back text.
  std::string finish();

  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace weft::text
