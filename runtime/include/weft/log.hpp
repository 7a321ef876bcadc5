#pragma once
// Minimal leveled logging to stderr. The level comes from the WEFT_LOG environment variable
// (error, warn, info, debug; default warn). Lines from several threads never interleave.

#include <string_view>

namespace weft {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

LogLevel log_level() noexcept;
void set_log_level(LogLevel level) noexcept;
void log(LogLevel level, std::string_view message);

inline void log_error(std::string_view message) {
  log(LogLevel::kError, message);
}
inline void log_warn(std::string_view message) {
  log(LogLevel::kWarn, message);
}
inline void log_info(std::string_view message) {
  log(LogLevel::kInfo, message);
}
inline void log_debug(std::string_view message) {
  log(LogLevel::kDebug, message);
}

}  // namespace weft
