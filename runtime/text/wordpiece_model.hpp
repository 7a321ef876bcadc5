#pragma once
// WordPiece (BERT): greedy longest-match-first inside each word, continuation pieces carry a
// prefix ("##"); a word with any unmatched part, or too long, becomes the unknown token.

#include <cstdint>
#include <string>

#include "runtime/text/model.hpp"
#include "weft/error.hpp"

namespace weft::text {

class WordPieceModel final : public Model {
 public:
  // Fails when the vocabulary lacks `unk_token`.
  static Result<WordPieceModel> create(Vocabulary vocabulary, const std::string& unk_token,
                                       std::string continuing_subword_prefix,
                                       std::size_t max_input_chars_per_word);

  void encode(std::string_view word, std::vector<std::uint32_t>& ids) const override;
  const Vocabulary& vocabulary() const override { return vocabulary_; }
  const std::string& continuing_subword_prefix() const { return prefix_; }

 private:
  Vocabulary vocabulary_;
  std::uint32_t unk_id_ = 0;
  std::string prefix_;
  std::size_t max_chars_ = 100;
};

}  // namespace weft::text
