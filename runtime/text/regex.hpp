#pragma once
// A compiled PCRE2 pattern (UTF + UCP, JIT when available) used by the Split pre-tokenizer and
// the Replace normalizer. `tokenizers` runs these patterns with Oniguruma; PCRE2 agrees with it
// on the syntax the Hugging Face tokenizers use (\p{L}, \p{N}, lookahead, (?i:...)).

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/error.hpp"

namespace weft::text {

class Regex {
 public:
  // Compiles `pattern`; the error names the pattern, the offset and PCRE2's reason.
  static Result<Regex> compile(std::string_view pattern);

  // Non-overlapping matches in `text` (valid UTF-8), left to right, as (begin, end) byte
  // offsets; an empty match advances by one character, as Oniguruma's find_iter does.
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const;

  // Whether the pattern matches somewhere in `text` (valid UTF-8). Throws weft::Error when
  // PCRE2 gives up (its match or depth limits), as find_all does.
  bool search(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  // The first match at or after byte `start`, as (begin, end); throws as find_all does.
  std::optional<std::pair<std::size_t, std::size_t>> match_from(std::string_view text,
                                                                std::size_t start) const;

  struct Code;
  std::shared_ptr<const Code> code_;  // immutable after compile: safe to share across threads
  std::string pattern_;
};

}  // namespace weft::text
