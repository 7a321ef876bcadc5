#pragma once
// The "encoder" section of a spec file (encoder-only networks, docs/model-spec.md) and the
// pooling a sentence-transformers folder asks for (1_Pooling/config.json, modules.json).

#include <filesystem>

#include "runtime/model/model_spec.hpp"
#include "weft/error.hpp"

namespace weft {

// Fills spec.encoder from `spec_file`'s "encoder" section and "tensors" keys
// (position_embedding, token_type_embedding, embedding_norm, prefixes), resolving field
// references against `config_json`. A missing section is an error naming it.
Result<void> read_encoder_spec(const std::filesystem::path& spec_file,
                               const std::filesystem::path& config_json, model::ModelSpec& spec);

// sentence-transformers' choices in `model_dir`: 1_Pooling/config.json picks mean or CLS
// pooling, a Normalize module in modules.json turns on L2 normalization. Absent files leave
// `encoder` as it is; a pooling mode Weft lacks (max, weighted mean, last token) is an error.
Result<void> read_sentence_transformers_pooling(const std::filesystem::path& model_dir,
                                                model::EncoderSpec& encoder);

}  // namespace weft
