#pragma once
// A model cut into stages by layer ranges (docs/parallel.md, "Pipeline"). A stage runs its
// layers over a step: the first embeds the tokens, a later one starts from the residual
// stream [tokens x hidden_size] the stage before produced, the last applies the final norm
// and the lm head. Stages run in one process (LayerPipeline: the GPU/CPU hybrid,
// --cpu-layers) or one per rank, joined by a communicator (runtime/parallel/pipeline_backend.hpp).
// A step's batch may be cut into micro-batches of whole sequences, so that while one stage
// runs micro-batch i the stage before runs i + 1.

#include <memory>
#include <span>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/model/forward_backend.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/step_batch.hpp"
#include "runtime/parallel/communicator.hpp"
#include "weft/error.hpp"

namespace weft::model {

class StageForward {
 public:
  virtual ~StageForward() = default;
  // The whole model's numbers (vocab, hidden size, layers) as this stage runs them.
  virtual const ModelSpec& spec() const noexcept = 0;
  virtual LayerRange layers() const noexcept = 0;
  virtual int num_pages() const noexcept = 0;
  virtual int page_size() const noexcept = 0;
  bool embeds() const noexcept { return layers().begin == 0; }
  bool ends() const noexcept { return layers().begin + layers().count == spec().num_layers; }
  // hidden_in: empty when the stage embeds, else [tokens x hidden_size]. `out`: the logits
  // (batch.logit_rows() x vocab_size) when the stage ends, else the residual stream after its
  // last layer. `tensor_parallel`: the stage's tensor-parallel group (host buffers), or null.
  virtual Result<void> forward(const StepBatch& batch, std::span<const float> hidden_in,
                               std::vector<float>& out,
                               parallel::Communicator* tensor_parallel = nullptr) = 0;

  // A GPU stage also runs from and into device memory (GPU pipelines over NCCL,
  // runtime/parallel/nccl_pipeline.hpp): its CUDA device and stream (-1 and null on the CPU),
  // and enqueue(), forward() with `hidden_in` and `out` in that device's memory (out: T x
  // hidden_size, or the logits when the stage ends; null then when nobody reads them),
  // enqueued on that stream without waiting for it (CudaModel::enqueue_layers).
  virtual int cuda_device() const noexcept { return -1; }
  virtual void* cuda_stream() const noexcept { return nullptr; }
  virtual Result<void> enqueue(const StepBatch& batch, const float* hidden_in, float* out,
                               parallel::Communicator* tensor_parallel = nullptr) {
    (void)batch;
    (void)hidden_in;
    (void)out;
    (void)tensor_parallel;
    return Error(ErrorCode::kUnsupported, "this pipeline stage runs from host memory only");
  }
  // Sampling on the stage's GPU, for the rank that samples (world rank 0 of a GPU pipeline):
  // adopt_logits() takes a step's logits (rows x vocab_size, host or this GPU's memory, ordered
  // on cuda_stream()) into the stage's sampler, sample() samples them as
  // ForwardBackend::sample does.
  virtual bool samples_on_device() const noexcept { return false; }
  virtual Result<void> adopt_logits(const float* logits, int rows) {
    (void)logits;
    (void)rows;
    return Error(ErrorCode::kUnsupported, "this pipeline stage has no sampler of its own");
  }
  virtual Result<void> sample(const DeviceSamplingInput& input, DeviceSamplingOutput& output) {
    (void)input;
    (void)output;
    return Error(ErrorCode::kUnsupported, "this pipeline stage has no sampler of its own");
  }
};

// A stage on the CPU: `model` (which must hold `layers` and outlive the stage) with a KV cache
// of `num_pages` pages for those layers only (layout's dtype and page size; its layer count
// is set here).
class CpuStage final : public StageForward {
 public:
  CpuStage(const Model& model, LayerRange layers, KvLayout layout, int num_pages, unsigned threads);
  const ModelSpec& spec() const noexcept override { return model_.spec(); }
  LayerRange layers() const noexcept override { return layers_; }
  int num_pages() const noexcept override { return kv_.num_pages(); }
  int page_size() const noexcept override { return kv_.layout().page_size; }
  Result<void> forward(const StepBatch& batch, std::span<const float> hidden_in,
                       std::vector<float>& out,
                       parallel::Communicator* tensor_parallel = nullptr) override;

 private:
  static KvLayout stage_layout(KvLayout layout, LayerRange layers) {
    layout.num_layers = layers.count;
    return layout;
  }
  const Model& model_;
  LayerRange layers_;
  KvCache kv_;
  cpu::ThreadPool pool_;
};

// Cuts a batch into at most `count` micro-batches of whole, consecutive sequences with about
// the same number of tokens each (none empty; a batch of fewer sequences gives fewer). Each
// is a StepBatch of its own (token_begin rebased); their logit rows, in order, are the
// batch's.
std::vector<StepBatch> split_micro_batches(const StepBatch& batch, int count);

// Stages in one process, run one after the other over each step: together a ForwardBackend.
// The stages' layer ranges must follow each other from layer 0 to the last, and their pools
// have the same page count (a page id names the same tokens in every stage's pool).
class LayerPipeline final : public ForwardBackend {
 public:
  static Result<std::unique_ptr<LayerPipeline>> create(
      std::vector<std::unique_ptr<StageForward>> stages);
  const ModelSpec& spec() const noexcept override { return stages_.front()->spec(); }
  int num_pages() const noexcept override { return stages_.front()->num_pages(); }
  Result<void> forward(const StepBatch& batch, std::vector<float>& logits) override;
  const std::vector<std::unique_ptr<StageForward>>& stages() const noexcept { return stages_; }

 private:
  explicit LayerPipeline(std::vector<std::unique_ptr<StageForward>> stages)
      : stages_(std::move(stages)) {}
  std::vector<std::unique_ptr<StageForward>> stages_;
  std::vector<float> hidden_, staged_;
};

// Checks that stages' ranges cover [0, num_layers) in order; the error names the gap.
Result<void> check_stage_ranges(const std::vector<LayerRange>& ranges, int num_layers);

}  // namespace weft::model
