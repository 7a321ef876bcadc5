#pragma once
// Pre-tokenizers of the `tokenizers` pipeline: each cuts the pieces of text into smaller
// pieces (words) that the model then encodes one by one.

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/text/regex.hpp"

namespace weft::text {

struct TextPiece {
  std::string text;
  // The piece begins at offset 0 of the user's text: Metaspace's prepend_scheme "first"
  // prepends only there.
  bool at_start = false;
};

// What happens to the matched delimiters (tokenizers' SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// (begin, end, is_match) ranges covering a text, in order.
struct MatchRange {
  std::size_t begin, end;
  bool is_match;
};

// Applies `behavior` to the ranges and appends the resulting non-empty pieces of `piece`.
void split_by_behavior(const TextPiece& piece, std::vector<MatchRange> ranges,
                       SplitBehavior behavior, std::vector<TextPiece>& out);

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their sub-pieces, in order; empty pieces are dropped.
  virtual void pre_tokenize(std::vector<TextPiece>& pieces) const = 0;
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(std::string literal, SplitBehavior behavior, bool invert)
      : literal_(std::move(literal)), behavior_(behavior), invert_(invert) {}
  SplitPreTokenizer(Regex regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<TextPiece>& pieces) const override;

 private:
  std::string literal_;
  std::optional<Regex> regex_;
  SplitBehavior behavior_;
  bool invert_;
};

// GPT-2's byte-level alphabet: every byte maps to one printable code point.
const std::array<std::string, 256>& byte_level_alphabet();

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex);
  void pre_tokenize(std::vector<TextPiece>& pieces) const override;

 private:
  bool add_prefix_space_;
  std::optional<Regex> regex_;  // GPT-2's split pattern, when use_regex
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void pre_tokenize(std::vector<TextPiece>& pieces) const override;

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

// Splits where `is_delimiter` holds for a character, each such character its own match.
class CharClassPreTokenizer final : public PreTokenizer {
 public:
  CharClassPreTokenizer(std::function<bool(char32_t)> is_delimiter, SplitBehavior behavior)
      : is_delimiter_(std::move(is_delimiter)), behavior_(behavior) {}
  void pre_tokenize(std::vector<TextPiece>& pieces) const override;

 private:
  std::function<bool(char32_t)> is_delimiter_;
  SplitBehavior behavior_;
};

// `\w+|[^\w\s]+` with Rust regex's Unicode \w: word runs and punctuation runs, spaces dropped.
class WhitespacePreTokenizer final : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<TextPiece>& pieces) const override;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void pre_tokenize(std::vector<TextPiece>& pieces) const override {
    for (const auto& step : steps_)
      step->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

// The character classes of BERT's and the Punctuation / Digits pre-tokenizers.
bool is_bert_punctuation(char32_t c);
bool is_numeric(char32_t c);

}  // namespace weft::text
