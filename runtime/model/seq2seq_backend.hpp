#pragma once
// An encoder-decoder model (Seq2SeqModel) behind the executor's ForwardBackend interface, so
// the engine schedules it as it schedules decoder-only models. A step is a StepBatch whose
// slices carry their cross-attention pages (SequenceSlice::cross_page_table, cross_length);
// slices with encoder_tokens run the encoder first, all of them in one batched pass that
// writes their cross pages, then every slice's decoder tokens run in one decoder pass
// (causal self-attention over the slice's page table, cross-attention over its cross pages).
// Page ids index the backend's one pool: the scheduler hands out self and cross pages alike.
//
// This is the CPU backend; a GPU one implements the same forward() over the same fields.

#include <memory>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/model/forward_backend.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/seq2seq_model.hpp"
#include "runtime/model/step_batch.hpp"

namespace weft::model {

// Splits a step into the encoder pass it asks for (the slices with encoder_tokens, in order)
// and each slice's cross-attention slice. Errors name the slice: encoder tokens without cross
// pages, a cross_length that disagrees with them, a decoder slice without cross pages.
struct Seq2SeqStepParts {
  EncodeBatch encode;
  std::vector<CrossAttentionSlice> encode_cross;  // one per encoded slice
  std::vector<CrossAttentionSlice> decode_cross;  // one per slice of the batch
};
Result<Seq2SeqStepParts> split_seq2seq_step(const StepBatch& batch);

class CpuSeq2SeqBackend final : public ForwardBackend {
 public:
  // `model` must outlive the backend. The pool holds num_pages pages of `layout` (the
  // decoder's layout, model.kv_layout, with the dtype chosen).
  CpuSeq2SeqBackend(const Seq2SeqModel& model, KvLayout layout, int num_pages, unsigned threads)
      : model_(model), kv_(layout, num_pages), pool_(threads) {}

  const ModelSpec& spec() const noexcept override { return model_.spec(); }
  int num_pages() const noexcept override { return kv_.num_pages(); }
  // The encoder passes the batch asks for, then its decoder tokens; logits as Model::forward.
  Result<void> forward(const StepBatch& batch, std::vector<float>& logits) override;

 private:
  const Seq2SeqModel& model_;
  KvCache kv_;
  cpu::ThreadPool pool_;
};

}  // namespace weft::model
