#pragma once
// The whole `tokenizers` pipeline for one tokenizer.json: added tokens, normalizer,
// pre-tokenizer, model, post-processor on the way in; decoder on the way out. Immutable once
// built, so one Tokenizer serves any number of threads.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/text/added_vocabulary.hpp"
#include "runtime/text/decoders.hpp"
#include "runtime/text/model.hpp"
#include "runtime/text/normalizers.hpp"
#include "runtime/text/post_processor.hpp"
#include "runtime/text/pre_tokenizers.hpp"
#include "weft/error.hpp"

namespace weft::text {

struct TokenizerParts {
  std::unique_ptr<Model> model;
  std::unique_ptr<Normalizer> normalizer;         // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer;    // may be null
  std::unique_ptr<PostProcessor> post_processor;  // may be null
  std::unique_ptr<Decoder> decoder;               // may be null: tokens joined with spaces
  std::vector<AddedToken> added_tokens;
};

class Tokenizer {
 public:
  explicit Tokenizer(TokenizerParts parts);

  // Ids of `text`, with the post-processor's special tokens when `add_special_tokens`.
  // Fails (kInvalidArgument, naming the byte offset) when `text` is not valid UTF-8: Python's
  // `tokenizers` cannot receive such text either.
  Result<std::vector<std::uint32_t>> encode(std::string_view text, bool add_special_tokens) const;

  // Text of `ids`. Fails (kOutOfRange, naming the position and the id) on an id that neither
  // the vocabulary nor the added tokens know.
  Result<std::string> decode(std::span<const std::uint32_t> ids, bool skip_special_tokens) const;

  std::optional<std::uint32_t> token_to_id(std::string_view token) const;
  // Null for an id that no token has.
  const std::string* id_to_token(std::uint32_t id) const;
  bool is_special(std::uint32_t id) const;
  // One past the largest id the tokenizer knows (the model's size, added tokens included).
  std::size_t vocab_size() const { return id_bound_; }
  const AddedVocabulary& added_vocabulary() const { return added_; }

 private:
  std::vector<std::uint32_t> encode_valid(std::string_view text, bool add_special_tokens) const;
  void encode_segment(std::string_view text, bool at_start, std::vector<std::uint32_t>& ids) const;

  TokenizerParts parts_;
  AddedVocabulary added_;
  std::size_t id_bound_ = 0;
  // Per id: skip_special_tokens drops it. tokenizers decides by the token's text, so a model
  // token spelled like a special added token is dropped too.
  std::vector<bool> skipped_as_special_;
};

}  // namespace weft::text
