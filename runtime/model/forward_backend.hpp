#pragma once
// What an executor runs: one device's forward pass together with the KV storage it owns.
// The CPU backend wraps Model, KvCache and a thread pool; the CUDA one is CudaModel
// (runtime/model/cuda/). Page ids in a StepBatch index the backend's own pool, which has
// num_pages() pages.

#include <memory>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/model_spec.hpp"
#include "runtime/model/step_batch.hpp"
#include "weft/error.hpp"

namespace weft::model {

class ForwardBackend {
 public:
  virtual ~ForwardBackend() = default;
  virtual const ModelSpec& spec() const noexcept = 0;
  virtual int num_pages() const noexcept = 0;
  // Model::forward's contract: writes the step's keys and values into their pages and fills
  // `logits` with batch.logit_rows() rows of vocab_size floats; a bad batch is an error.
  virtual Result<void> forward(const StepBatch& batch, std::vector<float>& logits) = 0;
};

class CpuForwardBackend final : public ForwardBackend {
 public:
  // `model` must outlive the backend.
  CpuForwardBackend(const Model& model, KvLayout layout, int num_pages, unsigned threads)
      : model_(model), kv_(layout, num_pages), pool_(threads) {}

  const ModelSpec& spec() const noexcept override { return model_.spec(); }
  int num_pages() const noexcept override { return kv_.num_pages(); }
  Result<void> forward(const StepBatch& batch, std::vector<float>& logits) override {
    return model_.forward(batch, kv_, logits, pool_);
  }

 private:
  const Model& model_;
  KvCache kv_;
  cpu::ThreadPool pool_;
};

}  // namespace weft::model
