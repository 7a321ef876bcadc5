#include "runtime/text/wordpiece_model.hpp"

#include "runtime/text/utf8.hpp"

namespace weft::text {

Result<WordPieceModel> WordPieceModel::create(Vocabulary vocabulary, const std::string& unk_token,
                                              std::string continuing_subword_prefix,
                                              std::size_t max_input_chars_per_word) {
  WordPieceModel model;
  auto unk = vocabulary.find(unk_token);
  if (!unk) {
    return Error(ErrorCode::kParse,
                 "WordPiece unk_token \"" + unk_token + "\" is not in the vocabulary");
  }
  model.vocabulary_ = std::move(vocabulary);
  model.unk_id_ = *unk;
  model.prefix_ = std::move(continuing_subword_prefix);
  model.max_chars_ = max_input_chars_per_word;
  return model;
}

void WordPieceModel::encode(std::string_view word, std::vector<std::uint32_t>& ids) const {
  std::size_t chars = 0;
  for (std::size_t pos = 0; pos < word.size();
       pos += utf8_length(static_cast<unsigned char>(word[pos]))) {
    ++chars;
  }
  if (chars > max_chars_) {
    ids.push_back(unk_id_);
    return;
  }
  const std::size_t first = ids.size();
  std::string candidate;
  for (std::size_t start = 0; start < word.size();) {
    // Longest piece starting at `start`: shrink the end one character at a time.
    std::size_t end = word.size();
    bool found = false;
    while (end > start) {
      candidate.clear();
      if (start > 0) candidate += prefix_;
      candidate.append(word.substr(start, end - start));
      if (auto id = vocabulary_.find(candidate)) {
        ids.push_back(*id);
        found = true;
        break;
      }
      do {
        --end;
      } while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
    }
    if (!found) {
      ids.resize(first);
      ids.push_back(unk_id_);
      return;
    }
    start = end;
  }
}

}  // namespace weft::text
