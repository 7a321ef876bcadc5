#pragma once
// The tokenizer and chat template a GGUF file carries in its tokenizer.* metadata, built as
// the equivalent tokenizer.json so that the one tokenizer pipeline (and the constraint
// engine's vocabulary reader) serves GGUF models too:
//   - tokenizer.ggml.model "gpt2": byte-level BPE with tokenizer.ggml.merges, the pre-tokenizer
//     regex chosen by tokenizer.ggml.pre;
//   - "llama": SentencePiece-style BPE over "▁"-joined text with byte fallback, the merges
//     derived from tokenizer.ggml.scores (a merge ranks by its result's score, as
//     transformers converts such vocabularies).
// Control and unknown tokens (token_type 3 and 2) become special added tokens, user-defined
// ones (4) plain added tokens; bos is prepended when tokenizer.ggml.add_bos_token says so.

#include <filesystem>
#include <string>

#include "loaders/chat_template_file.hpp"
#include "loaders/gguf_file.hpp"
#include "loaders/tokenizer_json.hpp"
#include "weft/error.hpp"

namespace weft {

// tokenizer.json text for the file's tokenizer. Errors name the metadata key.
Result<std::string> gguf_tokenizer_json(const gguf::File& file);

Result<loaders::LoadedTokenizer> load_gguf_tokenizer(const std::filesystem::path& path);

// tokenizer.chat_template as "default", tokenizer.chat_template.NAME as NAME; bos_token and
// eos_token as template variables. No template is a kNotFound error naming the file.
Result<ChatTemplateFile> read_gguf_chat_template(const std::filesystem::path& path);

// The tokenizer.json text of a model given as a folder (its tokenizer.json) or a GGUF file.
Result<std::string> read_tokenizer_json_text(const std::filesystem::path& model);

}  // namespace weft
