#include "weft/actor.hpp"

#include <string>

#include "weft/log.hpp"

namespace weft {
namespace {

std::atomic<std::size_t>& unhandled_count() {
  static std::atomic<std::size_t> count{0};
  return count;
}

}  // namespace

std::size_t unhandled_handler_exceptions() noexcept {
  return unhandled_count().load(std::memory_order_relaxed);
}

namespace detail {

void report_unhandled_exception(std::exception_ptr error, std::string_view where) noexcept {
  unhandled_count().fetch_add(1, std::memory_order_relaxed);
  try {
    std::string message = "exception escaped ";
    message += where;
    message += ": ";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      message += e.what();
    } catch (...) {
      message += "(not a std::exception)";
    }
    log_error(message);
  } catch (...) {
    // Logging itself failed (out of memory): the count above still records the event.
  }
}

}  // namespace detail
}  // namespace weft
