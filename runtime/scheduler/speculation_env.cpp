#include "runtime/scheduler/speculation_env.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace weft::sched {

std::function<void(const SpeculationTraceEvent&)> speculation_trace_from_env() {
  const char* path = std::getenv("WEFT_SPEC_TRACE");
  if (path == nullptr || *path == '\0') return nullptr;
  return speculation_trace_to_file(path);
}

int max_step_rows_from_env(int backend_rows) {
  const char* text = std::getenv("WEFT_SPEC_STEP_ROWS");
  if (text == nullptr || *text == '\0') return backend_rows;
  char* end = nullptr;
  const long rows = std::strtol(text, &end, 10);
  if (*end != '\0' || (rows != 0 && (rows < 2 || rows > 1024))) {
    std::fprintf(stderr,
                 "weft: ignoring WEFT_SPEC_STEP_ROWS=%s (expected a whole number from 2 to 1024, "
                 "or 0)\n",
                 text);
    return backend_rows;
  }
  if (rows == 0) return backend_rows;
  return backend_rows > 0 ? std::min(backend_rows, static_cast<int>(rows)) : static_cast<int>(rows);
}

}  // namespace weft::sched
