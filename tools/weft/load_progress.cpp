#include "tools/weft/load_progress.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>

namespace weft::cli {

std::function<void(std::size_t, std::size_t)> upload_progress(std::string device) {
  struct State {
    std::string device;
    bool tty = isatty(STDERR_FILENO) != 0;
    int last_tenth = -1;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  };
  auto state = std::make_shared<State>();
  state->device = std::move(device);
  return [state](std::size_t done, std::size_t total) {
    if (total == 0) return;
    const double fraction = static_cast<double>(done) / static_cast<double>(total);
    const int tenth = static_cast<int>(fraction * 10);
    const bool finished = done >= total;
    if (!state->tty && tenth == state->last_tenth && !finished) return;
    state->last_tenth = tenth;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(fraction * kWidth);
    std::string bar(static_cast<std::size_t>(filled), '#');
    bar.resize(kWidth, ' ');
    // Small models (weft-tiny) in MB, so the figures do not read 0.0 / 0.0.
    const bool gb = total >= 1000000000;
    const double unit = gb ? 1e9 : 1e6;
    std::fprintf(stderr, "%sweights -> %s [%s] %3d%%  %.1f / %.1f %s", state->tty ? "\r" : "",
                 state->device.c_str(), bar.c_str(), static_cast<int>(fraction * 100), done / unit,
                 total / unit, gb ? "GB" : "MB");
    if (finished) {
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - state->start).count();
      std::fprintf(stderr, "  in %.1f s (%.1f GB/s)\n", seconds,
                   seconds > 0 ? total / 1e9 / seconds : 0.0);
    } else if (!state->tty) {
      std::fprintf(stderr, "\n");
    }
    std::fflush(stderr);
  };
}

}  // namespace weft::cli
