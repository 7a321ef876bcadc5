#include "runtime/text/precompiled_normalizer.hpp"

#include <utf8proc.h>

#include <cstring>

#include "runtime/text/utf8.hpp"

namespace weft::text {
namespace {

// darts-clone unit fields.
bool has_leaf(std::uint32_t unit) {
  return ((unit >> 8) & 1) == 1;
}
std::uint32_t value_of(std::uint32_t unit) {
  return unit & ((1u << 31) - 1);
}
std::uint32_t label_of(std::uint32_t unit) {
  return unit & ((1u << 31) | 0xFF);
}
std::uint32_t offset_of(std::uint32_t unit) {
  return (unit >> 10) << ((unit & (1u << 9)) >> 6);
}

}  // namespace

std::optional<std::string> decode_base64(std::string_view text) {
  const auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  out.reserve(text.size() * 3 / 4);
  std::uint32_t bits = 0;
  int count = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '=') {
      if (text.substr(i).find_first_not_of('=') != std::string_view::npos) return std::nullopt;
      break;
    }
    const int v = value(text[i]);
    if (v < 0) return std::nullopt;
    bits = (bits << 6) | static_cast<std::uint32_t>(v);
    if (++count == 4) {
      out.push_back(static_cast<char>(bits >> 16));
      out.push_back(static_cast<char>(bits >> 8));
      out.push_back(static_cast<char>(bits));
      bits = 0;
      count = 0;
    }
  }
  if (count == 1) return std::nullopt;
  if (count == 2) out.push_back(static_cast<char>(bits >> 4));
  if (count == 3) {
    out.push_back(static_cast<char>(bits >> 10));
    out.push_back(static_cast<char>(bits >> 2));
  }
  return out;
}

Result<PrecompiledNormalizer> PrecompiledNormalizer::create(std::string_view charsmap) {
  if (charsmap.size() < 4) {
    return Error(ErrorCode::kParse, "precompiled_charsmap is " + std::to_string(charsmap.size()) +
                                        " bytes, shorter than its 4-byte header");
  }
  std::uint32_t trie_bytes = 0;
  for (int k = 3; k >= 0; --k)
    trie_bytes = (trie_bytes << 8) | static_cast<unsigned char>(charsmap[k]);
  if (trie_bytes % 4 != 0 || trie_bytes > charsmap.size() - 4 || trie_bytes == 0) {
    return Error(ErrorCode::kParse, "precompiled_charsmap declares a trie of " +
                                        std::to_string(trie_bytes) +
                                        " bytes, expected a non-zero multiple of 4 within its " +
                                        std::to_string(charsmap.size() - 4) + " bytes");
  }
  PrecompiledNormalizer n;
  n.trie_.resize(trie_bytes / 4);
  for (std::size_t i = 0; i < n.trie_.size(); ++i) {
    const auto* p = reinterpret_cast<const unsigned char*>(charsmap.data()) + 4 + 4 * i;
    n.trie_[i] = p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
  }
  n.replacements_ = std::string(charsmap.substr(4 + trie_bytes));
  if (const auto bad = find_invalid_utf8(n.replacements_); bad != std::string::npos) {
    return Error(ErrorCode::kParse,
                 "precompiled_charsmap's replacement strings are not UTF-8 (offset " +
                     std::to_string(bad) + ")");
  }
  return n;
}

std::optional<std::string_view> PrecompiledNormalizer::transform(std::string_view key) const {
  std::size_t node = offset_of(trie_[0]);
  for (unsigned char c : key) {
    if (c == 0) break;
    node ^= c;
    if (node >= trie_.size()) return std::nullopt;
    const std::uint32_t unit = trie_[node];
    if (label_of(unit) != c) return std::nullopt;
    node ^= offset_of(unit);
    if (node >= trie_.size()) return std::nullopt;
    if (has_leaf(unit)) {
      const std::size_t begin = value_of(trie_[node]);
      if (begin >= replacements_.size()) return std::string_view();
      const std::size_t end = replacements_.find('\0', begin);
      return std::string_view(replacements_)
          .substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    }
  }
  return std::nullopt;
}

void PrecompiledNormalizer::normalize(std::string& text) const {
  std::string out;
  out.reserve(text.size());
  bool modified = false;
  std::size_t pos = 0;
  while (pos < text.size()) {
    // One extended grapheme cluster: [pos, end).
    std::size_t end = pos;
    utf8proc_int32_t state = 0;
    char32_t previous = next_code_point(text, end);
    while (end < text.size()) {
      std::size_t next = end;
      const char32_t c = next_code_point(text, next);
      if (utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(previous),
                                           static_cast<utf8proc_int32_t>(c), &state)) {
        break;
      }
      previous = c;
      end = next;
    }
    const std::string_view grapheme = std::string_view(text).substr(pos, end - pos);
    pos = end;
    if (grapheme.size() < 6) {
      if (auto replacement = transform(grapheme)) {
        out.append(*replacement);
        modified = true;
        continue;
      }
    }
    for (std::size_t k = 0; k < grapheme.size();) {
      const std::size_t begin = k;
      k += utf8_length(static_cast<unsigned char>(grapheme[k]));
      const std::string_view part = grapheme.substr(begin, k - begin);
      if (auto replacement = transform(part)) {
        out.append(*replacement);
        modified = true;
      } else {
        out.append(part);
      }
    }
  }
  if (modified) text = std::move(out);
}

}  // namespace weft::text
