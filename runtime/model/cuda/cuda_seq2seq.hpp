#pragma once
// An encoder-decoder model (T5 v1.0/v1.1/mT5, M2M100/NLLB) on one GPU: the weights of a
// (CPU-bound, already checked) Seq2SeqModel uploaded in bf16 or fp16, and the forward pass of
// Seq2SeqModel::encode and ::decode with Seq2SeqSession's bookkeeping (Seq2SeqRunner):
//
//  - start: the new requests' sources packed end to end through the encoder in one pass
//    (pre-norm layers, a fused q/k/v product, attention in both directions within each source
//    with T5's relative bias, the MLP), then every decoder layer's cross-attention keys and
//    values computed once from the encoder output into a device buffer the request owns;
//  - step: one decoder token per request: causal self-attention over the request's own cache
//    (written as the step goes), cross-attention over its encoder output, the MLP, the final
//    norm (T5's d_model^-0.5 folded into its weight) and the lm head.
//
// The residual stream stays fp32; products take 16-bit inputs with fp32 sums (cuBLAS);
// attention scores, softmax and the norms are fp32. A request's caches are 16-bit, laid out
// [position][layer][k|v][heads * head_dim], allocated when it starts (its encoder tokens and
// max_decoder_tokens positions) and freed when it finishes.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/precision.hpp"
#include "runtime/model/seq2seq_model.hpp"
#include "runtime/model/seq2seq_runner.hpp"
#include "weft/error.hpp"

namespace weft::model {

struct CudaSeq2SeqOptions {
  int device = 0;
  cuda::Precision precision = cuda::Precision::kBF16;
};

class CudaSeq2Seq final : public Seq2SeqRunner {
 public:
  // Uploads the model's weights. Errors (naming what is unsupported): no such device, out of
  // device memory, head_dim above 256, a quantized model. `model` must outlive this.
  static Result<std::unique_ptr<CudaSeq2Seq>> create(const Seq2SeqModel& model,
                                                     const CudaSeq2SeqOptions& options);
  ~CudaSeq2Seq() override;
  CudaSeq2Seq(const CudaSeq2Seq&) = delete;
  CudaSeq2Seq& operator=(const CudaSeq2Seq&) = delete;

  // As Seq2SeqSession::start; `encoder_hidden`, when given, receives the encoder's last hidden
  // states ([tokens of all sources, hidden_size], after its final norm, as the 16-bit values
  // the cross-attention products read). Bad input (an empty source, a token outside the
  // vocabulary, a source longer than the attention's 32768 keys) is kInvalidArgument naming
  // the source; device memory running out is kResourceExhausted.
  Result<std::vector<int>> start(const std::vector<std::vector<std::int32_t>>& sources,
                                 int max_decoder_tokens) override;
  Result<std::vector<int>> start(const std::vector<std::vector<std::int32_t>>& sources,
                                 int max_decoder_tokens, std::vector<float>* encoder_hidden);
  Result<void> step(const std::vector<int>& ids, const std::vector<std::int32_t>& tokens,
                    std::vector<float>& logits) override;
  void finish(int id) override;
  std::string describe() const override;

  int decoded(int id) const;  // decoder tokens the request has taken (-1: unknown id)
  std::size_t weight_bytes() const noexcept;

  // The engine's form (CudaSeq2SeqBackend, cuda_seq2seq_backend.hpp): keys and values in a
  // pool of pages that the caller's page tables index, as the CPU's Seq2SeqModel keeps them
  // in a KvCache. A page holds `page_size` positions, each [layer][k | v][heads * head_dim]
  // in the model's precision, self- and cross-attention pages alike. num_pages 0 takes what
  // gpu_memory_fraction of the device leaves after what is in use; the pool is made once.
  // Errors: a second pool, no room (kResourceExhausted naming the sizes).
  Result<int> make_page_pool(int page_size, int num_pages, double gpu_memory_fraction);
  // Makes the step buffers hold `tokens` rows now (steps grow them when they need more).
  Result<void> reserve_step_buffers(int tokens);
  int pool_pages() const noexcept;
  // A step of the engine over the pool (split_seq2seq_step's parts): the encoder over the
  // slices with encoder_tokens, writing their cross pages, then every slice's decoder tokens
  // (causal self-attention over its page table, cross-attention over its cross pages);
  // `logits` gets batch.logit_rows() rows. Bad input (a page outside the pool, pages that do
  // not cover a position or a source, a token tree, a KV-Compress slot offset, a token
  // outside the vocabulary, more than 32768 keys) is kInvalidArgument naming the slice.
  Result<void> forward_pages(const StepBatch& batch, std::vector<float>& logits);

  struct State;

 private:
  explicit CudaSeq2Seq(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace weft::model
