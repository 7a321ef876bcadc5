#pragma once
// The byte string of every token id, read from a Hugging Face tokenizer.json's text: the
// model's vocab (byte-level BPE strings mapped back through GPT-2's byte-to-unicode table, or
// SentencePiece-style '▁' and <0xHH> byte-fallback pieces) plus added tokens, with the
// special ones flagged. This is what the matcher needs; the tokenizer itself is in text/.

#include <string_view>

#include "runtime/grammar/token_trie.hpp"
#include "weft/error.hpp"

namespace weft::grammar {

Result<TokenizerVocab> vocab_from_tokenizer_json(std::string_view json);

}  // namespace weft::grammar
