#pragma once
// The blocks only encoder-only networks (BERT, RoBERTa, XLM-R) have: token-type embeddings,
// learned absolute positions with an offset, a LayerNorm over the embeddings, and LayerNorm
// after each residual add (post-norm) instead of before each sub-layer. Read from a spec
// file's "encoder" section (docs/model-spec.md) into ModelSpec::encoder.

#include <string>
#include <vector>

namespace weft::model {

// How a sequence's last hidden states become one vector (sentence-transformers' Pooling).
enum class Pooling {
  kMean,  // mean over every token, special tokens included (as sentence-transformers does)
  kCls,   // the first token's hidden state ([CLS] / <s>), without BERT's pooler dense layer
};

struct EncoderSpec {
  int max_position_embeddings = 0;  // rows of the position table
  // Added to a token's index in its sequence to find its position row: 0 for BERT,
  // padding_idx + 1 for RoBERTa and XLM-R (transformers' create_position_ids_from_input_ids).
  int position_offset = 0;
  int type_vocab_size = 0;  // 0: no token-type table
  bool post_norm = true;    // LayerNorm after attention + residual and after MLP + residual
  Pooling pooling = Pooling::kMean;  // the model's default; 1_Pooling/config.json overrides
  bool normalize = false;            // L2-normalize pooled vectors; modules.json overrides

  // Tensor names. A checkpoint may keep them under a prefix (BertForMaskedLM saves
  // "bert.embeddings...", BertModel "embeddings..."): each of `tensor_prefixes` is tried in
  // order for the first tensor, and the one that matches is used for all.
  std::string position_embedding;
  std::string token_type_embedding;
  std::string embedding_norm;  // weight; its bias beside it
  std::vector<std::string> tensor_prefixes{""};
};

}  // namespace weft::model
