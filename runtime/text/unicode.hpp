#pragma once
// Unicode properties and normalization forms, with the exact semantics `tokenizers` gets from
// Rust's char methods and the unicode-normalization crate (backed here by utf8proc).

#include <string>
#include <string_view>

namespace weft::text {

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };

// `text` must be valid UTF-8.
std::string normalize_unicode(std::string_view text, NormalForm form);

// Rust char::is_whitespace (the White_Space property).
bool is_whitespace(char32_t c) noexcept;
// Rust char::is_alphanumeric (Alphabetic or Numeric).
bool is_alphanumeric(char32_t c) noexcept;
// Rust regex's \w: Alphabetic, Mark, Decimal_Number, Connector_Punctuation, Join_Control.
bool is_word_char(char32_t c) noexcept;
// Unicode general category P* (unicode_categories' is_punctuation).
bool is_punctuation(char32_t c) noexcept;
// Categories Cc, Cf, Cn, Co, Cs (unicode_categories' is_other): BERT drops these.
bool is_other(char32_t c) noexcept;
// Mark, nonspacing (Mn): what BERT's accent stripping removes after NFD.
bool is_nonspacing_mark(char32_t c) noexcept;
// Any mark (Mn, Mc, Me): what the StripAccents normalizer removes (unicode-normalization's
// is_combining_mark).
bool is_mark(char32_t c) noexcept;
// Rust char::to_lowercase, appended to `out` (one code point maps to two: U+0130).
void append_lowercase(std::string& out, char32_t c);

}  // namespace weft::text
