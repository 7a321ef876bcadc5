#pragma once
// What an executor runs: one device's forward pass together with the KV storage it owns.
// The CPU backend wraps Model, KvCache and a thread pool; the CUDA one is CudaModel
// (runtime/model/cuda/). Page ids in a StepBatch index the backend's own pool, which has
// num_pages() pages.

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/model_spec.hpp"
#include "runtime/model/step_batch.hpp"
#include "runtime/sampling/device_sampling.hpp"
#include "weft/error.hpp"

namespace weft::model {

// A step's sampling work for a backend that samples where its logits are
// (runtime/sampling/device_sampling.hpp): one DeviceSampleRow per sampled logit row.
struct DeviceSamplingInput {
  std::vector<sampling::DeviceSampleRow> rows;
  std::vector<sampling::DeviceSampleEdit> edits;
  std::vector<std::uint32_t> masks;  // the rows' bitmasks, at their mask_word_offset
};
struct DeviceSamplingOutput {
  std::vector<sampling::DeviceSampleResult> results;  // per row
  std::vector<sampling::DeviceCandidate> candidates;  // the pool; a row's from its result.offset
  std::vector<sampling::DeviceCandidate> top;         // per row, kDeviceTopEntries entries
  // Per row: the raw (masked) logits when its result says kHostRow, else empty.
  std::vector<std::vector<float>> host_rows;
};

class ForwardBackend {
 public:
  virtual ~ForwardBackend() = default;
  virtual const ModelSpec& spec() const noexcept = 0;
  virtual int num_pages() const noexcept = 0;
  // Model::forward's contract: writes the step's keys and values into their pages and fills
  // `logits` with batch.logit_rows() rows of vocab_size floats; a bad batch is an error.
  virtual Result<void> forward(const StepBatch& batch, std::vector<float>& logits) = 0;

  // Sampling on the device: launch() starts a step whose logits stay on the device (it may
  // return before they exist), then sample() samples its rows and waits for the results.
  // Backends that return true here implement both; the others never see them called.
  virtual bool samples_on_device() const noexcept { return false; }
  // Runs StepBatch slices with a token tree (tree attention; speculative verification).
  virtual bool supports_token_trees() const noexcept { return false; }
  // The most decode and verification rows a step may hold for its verification rows to give
  // bit for bit the logits plain decoding gives (the scheduler sizes draft trees to stay
  // within it; docs/speculative.md#exact-on-the-gpu); 0: any number.
  virtual int exact_verify_rows() const noexcept { return 0; }
  virtual Result<void> launch(const StepBatch& batch);
  virtual Result<void> sample(const DeviceSamplingInput& input, DeviceSamplingOutput& output);
  // The host-side preparation of the last step launched or run (its inputs built and copied
  // towards the device, before its first kernel), in nanoseconds; 0 where a backend does not
  // measure it. Read on the executor's thread after the call (docs/engine.md#step-phases).
  virtual std::uint64_t last_prepare_ns() const noexcept { return 0; }

  // Steps in flight (pipeline parallelism's sequence groups, docs/parallel.md): a backend that
  // returns N > 1 here lets up to N steps be submitted before the first is collected. submit()
  // runs this process's share of a step (a pipeline's first stage) and returns without its
  // logits; collect() waits for the oldest submitted step's logits (on_device: a backend that
  // samples on its device leaves them there for sample(), as launch() does). Steps of one
  // backend are collected in the order submitted.
  virtual int steps_in_flight() const noexcept { return 1; }
  virtual Result<void> submit(const StepBatch& batch);
  virtual Result<void> collect(std::vector<float>& logits, bool on_device);

  // Greedy chains on the device (a draft model's proposals, docs/speculative.md): runs
  // `first` (one logit row per slice, no token trees), then steps - 1 steps of one token per
  // slice at the positions after its last, each slice's token the argmax of its row in the
  // step before, picked and fed on the device: the host waits once for the whole chain.
  // `tokens` gets steps x slices argmaxes, step by step (-1: none). The page tables must
  // cover the last position. Backends that return true here implement it.
  virtual bool runs_greedy_chains() const noexcept { return false; }
  virtual Result<void> greedy_chain(const StepBatch& first, int steps,
                                    std::vector<std::int32_t>& tokens);
};

inline Result<void> ForwardBackend::greedy_chain(const StepBatch&, int,
                                                 std::vector<std::int32_t>&) {
  return Error(ErrorCode::kInternal, "this backend does not run greedy chains on its device");
}

inline Result<void> ForwardBackend::submit(const StepBatch&) {
  return Error(ErrorCode::kInternal, "this backend runs one step at a time");
}
inline Result<void> ForwardBackend::collect(std::vector<float>&, bool) {
  return Error(ErrorCode::kInternal, "this backend runs one step at a time");
}

inline Result<void> ForwardBackend::launch(const StepBatch&) {
  return Error(ErrorCode::kInternal, "this backend does not sample on its device");
}
inline Result<void> ForwardBackend::sample(const DeviceSamplingInput&, DeviceSamplingOutput&) {
  return Error(ErrorCode::kInternal, "this backend does not sample on its device");
}

class CpuForwardBackend final : public ForwardBackend {
 public:
  // `model` must outlive the backend. A tensor-parallel shard also takes its group's
  // communicator (host buffers), which must outlive the backend too.
  CpuForwardBackend(const Model& model, KvLayout layout, int num_pages, unsigned threads,
                    parallel::Communicator* tensor_parallel = nullptr)
      : model_(model), kv_(layout, num_pages), pool_(threads), tensor_parallel_(tensor_parallel) {}

  const ModelSpec& spec() const noexcept override { return model_.spec(); }
  int num_pages() const noexcept override { return kv_.num_pages(); }
  // Tree attention has no ALiBi bias yet: an ALiBi model verifies chains.
  bool supports_token_trees() const noexcept override { return model_.alibi_slopes().empty(); }
  Result<void> forward(const StepBatch& batch, std::vector<float>& logits) override {
    return model_.forward(batch, kv_, logits, pool_, cpu::KernelPath::kAuto, tensor_parallel_);
  }

 private:
  const Model& model_;
  KvCache kv_;
  cpu::ThreadPool pool_;
  parallel::Communicator* tensor_parallel_;
};

}  // namespace weft::model
