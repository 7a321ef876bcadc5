#include "runtime/text/utf8.hpp"

namespace weft::text {
namespace {

// Length of the well-formed sequence at bytes[pos], or 0 when the bytes there are ill-formed;
// `valid_prefix` gets how many bytes form a valid but incomplete prefix (Unicode's "maximal
// subpart"), which is what one U+FFFD replaces.
std::size_t sequence_at(std::string_view bytes, std::size_t pos, std::size_t& valid_prefix) {
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(bytes[i]); };
  const unsigned char c = b(pos);
  valid_prefix = 1;
  if (c < 0x80) return 1;
  std::size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (std::size_t k = 1; k <= need; ++k) {
    if (pos + k >= bytes.size()) return 0;
    const unsigned char d = b(pos + k);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (d < l || d > h) return 0;
    valid_prefix = k + 1;
  }
  return need + 1;
}

}  // namespace

char32_t next_code_point(std::string_view text, std::size_t& pos) noexcept {
  const auto c = static_cast<unsigned char>(text[pos]);
  const std::size_t n = utf8_length(c);
  if (n == 1 || pos + n > text.size()) {
    ++pos;
    return c;
  }
  char32_t cp = c & (0xFF >> (n + 1));
  for (std::size_t k = 1; k < n; ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(text[pos + k]) & 0x3F);
  pos += n;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::size_t find_invalid_utf8(std::string_view bytes) noexcept {
  std::size_t pos = 0, prefix = 0;
  while (pos < bytes.size()) {
    if (static_cast<unsigned char>(bytes[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const std::size_t n = sequence_at(bytes, pos, prefix);
    if (n == 0) return pos;
    pos += n;
  }
  return std::string_view::npos;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t pos = 0, prefix = 0;
  while (pos < bytes.size()) {
    const std::size_t n = sequence_at(bytes, pos, prefix);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      pos += prefix;
    } else {
      out.append(bytes.substr(pos, n));
      pos += n;
    }
  }
  return out;
}

std::size_t incomplete_utf8_tail(std::string_view bytes) noexcept {
  // A sequence is at most 4 bytes: look back at most 3 for a lead byte.
  for (std::size_t back = 1; back <= 3 && back <= bytes.size(); ++back) {
    const auto c = static_cast<unsigned char>(bytes[bytes.size() - back]);
    if ((c & 0xC0) == 0x80) continue;
    const std::size_t n = utf8_length(c);
    return n > back ? back : 0;
  }
  return 0;
}

}  // namespace weft::text
