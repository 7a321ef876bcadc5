#pragma once
// SentencePiece's precompiled normalizer (T5, XLM-R, mBART, ...): the model's normalization
// rules (nmt_nfkc and friends) compiled into a darts-clone double-array trie that maps source
// strings to replacement strings. Mirrors tokenizers' Precompiled normalizer, including its
// odd rule: a whole grapheme shorter than 6 bytes is replaced when any rule matches a prefix
// of it; otherwise its characters are looked up one by one.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/text/normalizers.hpp"
#include "weft/error.hpp"

namespace weft::text {

class PrecompiledNormalizer final : public Normalizer {
 public:
  // `charsmap` is the decoded precompiled_charsmap: u32 trie size in bytes (little-endian),
  // the trie's units, then the NUL-separated replacement strings. Fails when it is cut short,
  // when a trie offset points outside it, or when the strings are not UTF-8.
  static Result<PrecompiledNormalizer> create(std::string_view charsmap);

  void normalize(std::string& text) const override;

 private:
  // The replacement for the shortest rule that is a prefix of `key`, if any.
  std::optional<std::string_view> transform(std::string_view key) const;

  std::vector<std::uint32_t> trie_;
  std::string replacements_;
};

// Standard base64 (with or without padding), as serde writes precompiled_charsmap.
std::optional<std::string> decode_base64(std::string_view text);

}  // namespace weft::text
