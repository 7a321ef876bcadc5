#include "runtime/model/seq2seq_backend.hpp"

#include <string>

namespace weft::model {

Result<Seq2SeqStepParts> split_seq2seq_step(const StepBatch& batch) {
  Seq2SeqStepParts parts;
  parts.decode_cross.reserve(batch.sequences.size());
  for (std::size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceSlice& slice = batch.sequences[s];
    const std::string where = "slice " + std::to_string(s) + ": ";
    if (slice.cross_length <= 0 || slice.cross_page_table.empty()) {
      return Error(ErrorCode::kInvalidArgument,
                   where + "an encoder-decoder step needs each slice's cross-attention pages");
    }
    CrossAttentionSlice cross{slice.cross_page_table, slice.cross_length};
    if (!slice.encoder_tokens.empty()) {
      if (static_cast<int>(slice.encoder_tokens.size()) != slice.cross_length) {
        return Error(ErrorCode::kInvalidArgument, where +
                                                      std::to_string(slice.encoder_tokens.size()) +
                                                      " encoder tokens but a cross length of " +
                                                      std::to_string(slice.cross_length));
      }
      parts.encode.tokens.insert(parts.encode.tokens.end(), slice.encoder_tokens.begin(),
                                 slice.encoder_tokens.end());
      parts.encode.lengths.push_back(slice.cross_length);
      parts.encode_cross.push_back(cross);
    }
    parts.decode_cross.push_back(std::move(cross));
  }
  return parts;
}

Result<void> CpuSeq2SeqBackend::forward(const StepBatch& batch, std::vector<float>& logits) {
  auto parts = split_seq2seq_step(batch);
  if (!parts) return parts.error();
  if (!parts->encode.lengths.empty()) {
    if (auto ok = model_.encode(parts->encode, parts->encode_cross, kv_, pool_); !ok) return ok;
  }
  return model_.decode(batch, parts->decode_cross, kv_, logits, pool_);
}

}  // namespace weft::model
