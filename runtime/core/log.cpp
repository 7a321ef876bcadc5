#include "weft/log.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace weft {
namespace {

LogLevel level_from_env() {
  const char* env = std::getenv("WEFT_LOG");
  if (env == nullptr) return LogLevel::kWarn;
  std::string_view v(env);
  if (v == "error") return LogLevel::kError;
  if (v == "info") return LogLevel::kInfo;
  if (v == "debug") return LogLevel::kDebug;
  return LogLevel::kWarn;
}

std::atomic<LogLevel>& level_ref() {
  static std::atomic<LogLevel> level{level_from_env()};
  return level;
}

const char* tag(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kDebug:
      return "debug";
  }
  return "?";
}

}  // namespace

LogLevel log_level() noexcept {
  return level_ref().load(std::memory_order_relaxed);
}

void set_log_level(LogLevel level) noexcept {
  level_ref().store(level, std::memory_order_relaxed);
}

void log(LogLevel level, std::string_view message) {
  if (static_cast<int>(level) > static_cast<int>(log_level())) return;
  static std::mutex mutex;
  std::string line = "weft ";
  line += tag(level);
  line += ": ";
  line += message;
  line += '\n';
  std::lock_guard lock(mutex);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace weft
