#pragma once
// An encoder-decoder model on one GPU behind the executor's ForwardBackend interface: the
// GPU's counterpart of CpuSeq2SeqBackend (runtime/model/seq2seq_backend.hpp). A step's slices
// with encoder_tokens run the encoder in one batched pass that writes their cross-attention
// pages, then every slice's decoder tokens run in one decoder pass; self and cross pages come
// from the one pool the scheduler hands out and counts (CudaSeq2Seq::forward_pages).

#include <memory>
#include <string>
#include <vector>

#include "runtime/model/cuda/cuda_seq2seq.hpp"
#include "runtime/model/forward_backend.hpp"

namespace weft::model {

struct CudaSeq2SeqBackendOptions {
  int device = 0;
  // Pages of the layout; 0: what gpu_memory_fraction of the device leaves after the weights
  // and the step buffers.
  int num_pages = 0;
  double gpu_memory_fraction = 0.9;
  int max_tokens_per_step = 512;  // step buffers made up front (a larger step grows them)
};

class CudaSeq2SeqBackend final : public ForwardBackend {
 public:
  // Uploads the weights in bf16 and makes the pool. `layout` is model.kv_layout's with its
  // dtype: bf16 only (the precision the model runs in), else kUnsupported naming
  // kv_cache_dtype. `model` must outlive the backend.
  static Result<std::unique_ptr<CudaSeq2SeqBackend>> create(
      const Seq2SeqModel& model, const KvLayout& layout, const CudaSeq2SeqBackendOptions& options);

  const ModelSpec& spec() const noexcept override { return spec_; }
  int num_pages() const noexcept override { return gpu_->pool_pages(); }
  Result<void> forward(const StepBatch& batch, std::vector<float>& logits) override {
    return gpu_->forward_pages(batch, logits);
  }
  std::string describe() const { return gpu_->describe(); }

 private:
  CudaSeq2SeqBackend(const ModelSpec& spec, std::unique_ptr<CudaSeq2Seq> gpu)
      : spec_(spec), gpu_(std::move(gpu)) {}
  const ModelSpec& spec_;
  std::unique_ptr<CudaSeq2Seq> gpu_;
};

}  // namespace weft::model
