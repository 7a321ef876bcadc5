#pragma once
// Added tokens (special or not) found inside the text before the model sees it, exactly as
// tokenizers' AddedVocabulary does: leftmost-longest matching, single_word, lstrip, rstrip;
// tokens with normalized=false match the raw text, the others the normalized text.

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace weft::text {

class Normalizer;

struct AddedToken {
  std::string content;
  std::uint32_t id = 0;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
  // What decode shows for this id: for normalized tokens, the normalized content (tokenizers
  // >= 0.22 decodes those through the normalized form so the decoder can invert it).
  std::string decode_form;
};

// A piece of the input: text still to encode, or an added token already recognised.
struct Segment {
  std::string_view text;
  std::int64_t id = -1;    // the added token's id, or -1 for text
  std::size_t offset = 0;  // byte offset of `text` inside the string that was split
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  // `normalizer` (may be null) normalizes the contents of normalized tokens, as their matches
  // are looked for in normalized text.
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  // Splits `text` around the raw (normalized = false) or the normalized tokens; empty text
  // segments are left out.
  void split(std::string_view text, bool normalized_tokens, std::vector<Segment>& out) const;

  const AddedToken* find_id(std::uint32_t id) const {
    auto it = by_id_.find(id);
    return it == by_id_.end() ? nullptr : &tokens_[it->second];
  }
  const AddedToken* find_content(std::string_view content) const {
    auto it = by_content_.find(std::string(content));
    return it == by_content_.end() ? nullptr : &tokens_[it->second];
  }
  bool is_special_content(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  struct Trie {
    std::unordered_map<std::uint64_t, std::uint32_t> children;  // (node << 8 | byte) -> node
    std::vector<std::int32_t> terminal{-1};                     // node -> index in tokens_
    bool first_byte[256] = {};
    void insert(std::string_view key, std::int32_t token_index);
  };
  const Trie& trie(bool normalized) const { return normalized ? normalized_ : raw_; }

  std::vector<AddedToken> tokens_;
  std::unordered_map<std::uint32_t, std::size_t> by_id_;
  std::unordered_map<std::string, std::size_t> by_content_;
  Trie raw_, normalized_;
};

}  // namespace weft::text
