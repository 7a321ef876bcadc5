#pragma once
// Requests on an encoder-decoder model (Seq2SeqModel) over one KvCache, on the CPU: the
// bookkeeping a scheduler needs, as a plain class without threads. `start` encodes a batch of
// new requests in one encoder pass and gives each its cross-attention pages (the encoder
// output's keys and values, written once); `step` runs one decoder step for any set of live
// requests together, growing their self-attention pages as positions need; `finish` frees a
// request's pages, cross and self alike. Page counts are exact: a request that would not fit
// is refused before anything is written.

#include <cstdint>
#include <map>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/seq2seq_model.hpp"
#include "weft/error.hpp"

namespace weft::model {

class Seq2SeqSession {
 public:
  // The pool: `num_pages` pages of the model's decoder layout with `page_size` tokens each.
  Seq2SeqSession(const Seq2SeqModel& model, int page_size, int num_pages, unsigned threads = 0,
                 KvDtype kv_dtype = KvDtype::kF32);

  // Encodes every source (one encoder pass for all) and returns one request id per source.
  // `max_decoder_tokens` is how many decoder positions each request may use (its start token
  // included): their pages are reserved now, so a started request never runs out. Too few free
  // pages is kResourceExhausted, naming what was needed and what is free.
  Result<std::vector<int>> start(const std::vector<std::vector<std::int32_t>>& sources,
                                 int max_decoder_tokens);

  // One decoder step: request ids[i] takes tokens[i] at its next position; logits receives one
  // row of vocab_size floats per request, in order. The first token of a request is usually
  // the model's decoder_start_token_id.
  Result<void> step(const std::vector<int>& ids, const std::vector<std::int32_t>& tokens,
                    std::vector<float>& logits);

  // Frees the request's pages (unknown ids are ignored).
  void finish(int id);

  int free_pages() const noexcept { return kv_.free_pages(); }
  int decoded(int id) const;  // decoder tokens the request has taken so far (-1: unknown id)
  const KvCache& kv() const noexcept { return kv_; }

 private:
  struct Request {
    CrossAttentionSlice cross;
    std::vector<std::int32_t> self_pages;
    int max_tokens = 0;
    int position = 0;  // the next decoder position
  };

  const Seq2SeqModel& model_;
  KvCache kv_;
  cpu::ThreadPool pool_;
  std::map<int, Request> requests_;
  int next_id_ = 0;
};

}  // namespace weft::model
