#include "tools/weft/json_lines.hpp"

#include <optional>
#include <string>

#include "runtime/text/utf8.hpp"

namespace weft::cli {
namespace {

std::string hex_byte(unsigned char b) {
  static const char* hex = "0123456789abcdef";
  return {'0', 'x', hex[b >> 4], hex[b & 15]};
}

// The 16-bit unit of the four hex digits at `line[pos]`, if there are four.
std::optional<unsigned> hex_unit(std::string_view line, std::size_t pos) {
  if (pos + 4 > line.size()) return std::nullopt;
  unsigned unit = 0;
  for (std::size_t i = pos; i < pos + 4; ++i) {
    const char c = line[i];
    unit <<= 4;
    if (c >= '0' && c <= '9') {
      unit |= static_cast<unsigned>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      unit |= static_cast<unsigned>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      unit |= static_cast<unsigned>(c - 'A' + 10);
    } else {
      return std::nullopt;
    }
  }
  return unit;
}

// Offset of the first \uXXXX escape inside a JSON string of `line` that is a surrogate
// without its partner (RFC 8259 section 7: a high one must be followed by a low one), or npos.
// Malformed escapes are left to the JSON parser.
std::size_t find_unpaired_surrogate(std::string_view line) {
  bool in_string = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (!in_string) {
      in_string = c == '"';
      continue;
    }
    if (c == '"') {
      in_string = false;
      continue;
    }
    if (c != '\\' || i + 1 == line.size()) continue;
    if (line[i + 1] != 'u') {
      ++i;  // a one-letter escape, \" among them
      continue;
    }
    const auto unit = hex_unit(line, i + 2);
    if (!unit) continue;
    if (*unit >= 0xDC00 && *unit <= 0xDFFF) return i;
    if (*unit >= 0xD800 && *unit <= 0xDBFF) {
      const bool escape_follows = i + 7 < line.size() && line[i + 6] == '\\' && line[i + 7] == 'u';
      const auto low = escape_follows ? hex_unit(line, i + 8) : std::nullopt;
      if (!low || *low < 0xDC00 || *low > 0xDFFF) return i;
      i += 11;
      continue;
    }
    i += 5;
  }
  return std::string_view::npos;
}

}  // namespace

Result<boost::json::value> parse_json_line(std::string_view line, std::string_view expected) {
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) {
    return Error(ErrorCode::kParse, "empty line; expected " + std::string(expected));
  }
  if (const std::size_t bad = text::find_invalid_utf8(line); bad != std::string_view::npos) {
    return Error(ErrorCode::kParse, "not valid UTF-8: ill-formed byte " +
                                        hex_byte(static_cast<unsigned char>(line[bad])) +
                                        " at offset " + std::to_string(bad));
  }
  if (const std::size_t at = find_unpaired_surrogate(line); at != std::string_view::npos) {
    return Error(ErrorCode::kParse, "the string holds an unpaired surrogate " +
                                        std::string(line.substr(at, 6)) + " at offset " +
                                        std::to_string(at) + " (not valid Unicode)");
  }
  boost::system::error_code ec;
  boost::json::value value = boost::json::parse(line, ec);
  if (ec) {
    return Error(ErrorCode::kParse,
                 "expected " + std::string(expected) + " (" + ec.message() + ")");
  }
  return value;
}

}  // namespace weft::cli
