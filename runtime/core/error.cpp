#include "weft/error.hpp"

namespace weft {

std::string_view to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kParse:
      return "parse_error";
    case ErrorCode::kUnsupported:
      return "unsupported";
    case ErrorCode::kOutOfRange:
      return "out_of_range";
    case ErrorCode::kResourceExhausted:
      return "resource_exhausted";
    case ErrorCode::kCancelled:
      return "cancelled";
    case ErrorCode::kShutdown:
      return "shutdown";
    case ErrorCode::kInternal:
      return "internal";
    case ErrorCode::kIo:
      return "io_error";
  }
  return "unknown";
}

}  // namespace weft
