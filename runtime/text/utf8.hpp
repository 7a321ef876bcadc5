#pragma once
// UTF-8 helpers shared by the tokenizer pipeline. Text inside the pipeline is always valid
// UTF-8 (Tokenizer::encode checks its input once), so the decoders here need not re-check.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace weft::text {

// Length of the UTF-8 sequence that starts with `lead` (1 for a stray continuation byte, so a
// walk over bytes always advances).
inline std::size_t utf8_length(unsigned char lead) noexcept {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

// Decodes the code point at `text[pos]` (text must be valid UTF-8) and advances `pos`.
char32_t next_code_point(std::string_view text, std::size_t& pos) noexcept;

void append_utf8(std::string& out, char32_t cp);

// Offset of the first byte that is not part of a well-formed UTF-8 sequence, or npos.
std::size_t find_invalid_utf8(std::string_view bytes) noexcept;

// Rust's String::from_utf8_lossy: every maximal ill-formed subsequence becomes one U+FFFD.
// The byte-level and byte-fallback decoders must produce exactly what `tokenizers` does.
std::string utf8_lossy(std::string_view bytes);

// Number of trailing bytes of `bytes` that start an incomplete but so far valid sequence
// (0 when the text ends on a character boundary).
std::size_t incomplete_utf8_tail(std::string_view bytes) noexcept;

}  // namespace weft::text
