#pragma once
// Incremental detokenization for one sequence: ids arrive a few at a time, text leaves as
// deltas that are always valid UTF-8 and whose concatenation (with finish()) equals
// Tokenizer::decode of all the ids.
//
// Decoding a token alone is wrong for every family here (byte-level BPE and byte fallback split
// characters across tokens; Metaspace and Strip decoders treat the first token specially), so
// each step decodes a short window: the tokens already emitted since `prefix_` give the text
// to subtract, the new tokens the text to add. The window slides once a step's text ends on a
// whole character (no trailing U+FFFD), as in tokenizers' DecodeStream and vLLM.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/text/tokenizer.hpp"
#include "weft/error.hpp"

namespace weft::text {

class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special_tokens);

  // Appends `ids` and returns the text they complete (possibly empty while a character is
  // still incomplete). Fails on an id the tokenizer does not know; the state is then unchanged.
  Result<std::string> push(std::span<const std::uint32_t> ids);
  Result<std::string> push(std::uint32_t id) { return push(std::span(&id, 1)); }

  // End of the sequence: whatever was held back (an incomplete or invalid character decodes
  // to U+FFFD, as the full decode shows it).
  Result<std::string> finish();

  const std::vector<std::uint32_t>& ids() const { return ids_; }

 private:
  Result<std::string> step(bool final);

  std::shared_ptr<const Tokenizer> tokenizer_;
  bool skip_special_tokens_;
  std::vector<std::uint32_t> ids_;
  std::size_t prefix_ = 0;  // window start: the decoder sees ids_[prefix_..]
  std::size_t read_ = 0;    // ids_[prefix_, read_) are already emitted
};

}  // namespace weft::text
