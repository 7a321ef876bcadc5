#pragma once
// Reading JSON Lines from standard input (`weft tokenize --jsonl`, `weft detokenize`): one
// JSON value per line, and an error that says what is wrong with a bad line in the terms of
// the bytes the user wrote, not only the JSON parser's.

#include <boost/json.hpp>
#include <string_view>

#include "weft/error.hpp"

namespace weft::cli {

// Parses one line (without its '\n'). `expected` says what a line should hold, e.g. "one
// JSON string per line". Refused, each with its own message: an empty (or blank) line, bytes
// that are not UTF-8 (the first ill-formed byte and its offset), a string with a \uXXXX
// surrogate escape that is not part of a pair (no Unicode text holds one), and anything else
// that is not JSON. The caller checks the value's type.
Result<boost::json::value> parse_json_line(std::string_view line, std::string_view expected);

}  // namespace weft::cli
