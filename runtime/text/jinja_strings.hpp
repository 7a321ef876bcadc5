#pragma once
// Python's str methods on UTF-8 text, as Jinja templates call them: lengths, indices and
// slices count code points; strip() and split() use Python's Unicode whitespace. Case
// mappings (upper, lower, title, capitalize) change ASCII letters only; other letters are
// left as they are (a documented difference from Python).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weft::jinja {

// The code points of UTF-8 text; bytes that are not valid UTF-8 become one code point each
// (their byte value), so malformed input never fails here.
std::vector<char32_t> decode_utf8(std::string_view text);
void append_utf8(char32_t cp, std::string& out);
std::size_t count_code_points(std::string_view text);

// Python's str.isspace() for one code point.
bool is_python_space(char32_t cp);

enum class StripSide { kLeft, kRight, kBoth };
// str.strip/lstrip/rstrip: whitespace when `chars` is empty-optional, else the given set.
std::string py_strip(std::string_view text, const std::optional<std::string>& chars,
                     StripSide side);
// str.split(sep, maxsplit); no `sep` splits on runs of whitespace and drops empty parts.
std::vector<std::string> py_split(std::string_view text, const std::optional<std::string>& sep,
                                  std::int64_t maxsplit);
std::string py_replace(std::string_view text, std::string_view old_text, std::string_view new_text,
                       std::int64_t count);
std::string py_upper(std::string_view text);
std::string py_lower(std::string_view text);
std::string py_title(std::string_view text);
std::string py_capitalize(std::string_view text);
// Jinja's `title` filter, which is not str.title(): words start after '-', '(', '{', '[', '<'
// or whitespace; each word's first character is upper-cased and the rest lower-cased.
std::string jinja_title(std::string_view text);

}  // namespace weft::jinja
