#pragma once
// Reads a Hugging Face tokenizer: tokenizer.json (the `tokenizers` format) plus, beside it,
// tokenizer_config.json and special_tokens_map.json for the named special tokens.

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/text/tokenizer.hpp"
#include "weft/error.hpp"

namespace weft::loaders {

// The special tokens a model folder names (tokenizer_config.json first, then
// special_tokens_map.json), with their ids when the tokenizer knows them.
struct SpecialTokenNames {
  std::optional<std::string> bos, eos, pad, unk;
  std::optional<std::uint32_t> bos_id, eos_id, pad_id, unk_id;
};

struct LoadedTokenizer {
  std::shared_ptr<const text::Tokenizer> tokenizer;
  SpecialTokenNames special;
  std::filesystem::path tokenizer_json;  // the file that was read
};

// `path` is a tokenizer.json or a folder holding one. Errors name the file, the field and what
// was expected; an unknown component type is kUnsupported, naming the type.
Result<LoadedTokenizer> load_tokenizer(const std::filesystem::path& path);

// Builds a tokenizer from the text of a tokenizer.json; `source` names it in errors.
Result<std::unique_ptr<text::Tokenizer>> parse_tokenizer_json(std::string_view json,
                                                              const std::string& source);

}  // namespace weft::loaders
