#pragma once
// Requests on an encoder-decoder model, whatever runs them: the CPU (Seq2SeqSession over a
// KvCache) or a GPU (CudaSeq2Seq, runtime/model/cuda/cuda_seq2seq.hpp). The calls are
// Seq2SeqSession's: `start` encodes new requests' sources in one pass and keeps their
// cross-attention keys and values, `step` runs one decoder step for any set of live requests,
// `finish` frees a request. `weft generate` drives one of these (docs/seq2seq.md).

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model/seq2seq_session.hpp"
#include "weft/error.hpp"

namespace weft::model {

class Seq2SeqRunner {
 public:
  virtual ~Seq2SeqRunner() = default;
  // One request id per source; each may take `max_decoder_tokens` decoder positions.
  virtual Result<std::vector<int>> start(const std::vector<std::vector<std::int32_t>>& sources,
                                         int max_decoder_tokens) = 0;
  // Request ids[i] takes tokens[i]; logits: one row of vocab_size floats per request.
  virtual Result<void> step(const std::vector<int>& ids, const std::vector<std::int32_t>& tokens,
                            std::vector<float>& logits) = 0;
  virtual void finish(int id) = 0;
  // "cpu" or "cuda:N (bf16)", for reports.
  virtual std::string describe() const = 0;
};

// The CPU: a Seq2SeqSession of `num_pages` pages.
class CpuSeq2SeqRunner final : public Seq2SeqRunner {
 public:
  CpuSeq2SeqRunner(const Seq2SeqModel& model, int page_size, int num_pages, unsigned threads,
                   KvDtype kv_dtype)
      : session_(model, page_size, num_pages, threads, kv_dtype) {}
  Result<std::vector<int>> start(const std::vector<std::vector<std::int32_t>>& sources,
                                 int max_decoder_tokens) override {
    return session_.start(sources, max_decoder_tokens);
  }
  Result<void> step(const std::vector<int>& ids, const std::vector<std::int32_t>& tokens,
                    std::vector<float>& logits) override {
    return session_.step(ids, tokens, logits);
  }
  void finish(int id) override { session_.finish(id); }
  std::string describe() const override { return "cpu"; }

 private:
  Seq2SeqSession session_;
};

}  // namespace weft::model
