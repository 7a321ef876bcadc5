#pragma once
// Pipeline parallelism across processes (docs/parallel.md, "Pipeline"): each rank runs one
// stage (a layer range, runtime/model/layer_pipeline.hpp) of the model, or its shard of one
// when the stage is a tensor-parallel group (hybrid: ranks are numbered stage * N + tp_rank).
// Every rank sees every step's batch (the leader broadcasts it, step_broadcast.hpp; `weft
// generate` runs the same loop everywhere), cuts it into the same micro-batches, and for each
// receives the residual stream from its peer in the stage before, runs its layers and sends
// the result to its peer in the stage after. Stage 0 goes on to micro-batch i + 1 while
// stage 1 runs i. The last stage's tp rank 0 sends each micro-batch's logits to world rank 0,
// where the engine's sampler is: only rank 0's forward() returns logits. GPU stages on GPUs of
// their own exchange device buffers over NCCL instead (DeviceStageLinks, nccl_pipeline.hpp).

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/model/forward_backend.hpp"
#include "runtime/model/layer_pipeline.hpp"
#include "runtime/parallel/communicator.hpp"

namespace weft::parallel {

// Where a rank sits: world rank = stage * tensor_parallel + tp_rank.
struct PipelinePlace {
  int stage = 0;
  int stages = 1;
  int tp_rank = 0;
  int tensor_parallel = 1;
  int world_rank(int at_stage, int at_tp_rank) const {
    return at_stage * tensor_parallel + at_tp_rank;
  }
};

// The place of world rank `rank` in tensor_parallel x stages ranks.
PipelinePlace pipeline_place(int rank, int tensor_parallel, int stages);

// How GPU stages hand the residual stream and the logits on device to device, with
// communication on streams of its own beside the stage's compute (nccl_pipeline.hpp makes
// one over NCCL). Once made, PipelineBackend runs every step through it.
class DeviceStageLinks {
 public:
  virtual ~DeviceStageLinks() = default;
  // One step cut into `parts`: each is received from the stage before (unless this stage
  // embeds), enqueued on the stage and sent on. On world rank 0 `logits` gets the step's
  // logits (logit_rows x vocab_size); elsewhere it is left empty.
  // With logits_on_device, rank 0 leaves them on its GPU instead, taken into the stage's
  // sampler (StageForward::adopt_logits) on the stage's stream, and returns without waiting.
  virtual Result<void> forward(model::StageForward& stage,
                               const std::vector<model::StepBatch>& parts,
                               std::vector<float>& logits, Communicator* tensor_group,
                               bool logits_on_device) = 0;
  // For logs: what carries the stages' messages.
  virtual std::string description() const = 0;

  // Steps in flight (sequence groups), on world rank 0: forward_deferred() enqueues a step as
  // forward() does, its logits received into a buffer of its own, and returns without
  // waiting; take_logits() then takes the oldest deferred step's logits (to the host, or with
  // on_device into the stage's sampler as forward() leaves them). Links that return false from
  // defers_logits() run each step whole in PipelineBackend::submit() instead.
  virtual bool defers_logits() const { return false; }
  virtual Result<void> forward_deferred(model::StageForward& stage,
                                        const std::vector<model::StepBatch>& parts,
                                        Communicator* tensor_group);
  virtual Result<void> take_logits(model::StageForward& stage, std::vector<float>& logits,
                                   bool on_device);
};

inline Result<void> DeviceStageLinks::forward_deferred(model::StageForward&,
                                                       const std::vector<model::StepBatch>&,
                                                       Communicator*) {
  return Error(ErrorCode::kInternal, "pipeline: these links do not defer a step's logits");
}
inline Result<void> DeviceStageLinks::take_logits(model::StageForward&, std::vector<float>&, bool) {
  return Error(ErrorCode::kInternal, "pipeline: these links do not defer a step's logits");
}

// Makes a rank's links at the first step, collectively over `world` (every rank calls it at
// the same point, with the same answer: links on every rank, or null on every rank, which
// keeps the host path).
using DeviceLinksFactory = std::function<Result<std::unique_ptr<DeviceStageLinks>>(
    Communicator& world, const PipelinePlace& place, model::StageForward& stage)>;

class PipelineBackend final : public model::ForwardBackend {
 public:
  // `world` (host buffers) must outlive the backend and have stages * tensor_parallel ranks;
  // `stage` holds this rank's layers. With tensor_parallel > 1 the stage's group is split
  // from the world at the first step (MPI_Comm_split is collective over the world, and the
  // first step is the first moment every rank is sure to be in the same call).
  // micro_batches: how many pieces each step is cut into (at most one per sequence).
  // groups: how many steps may be in flight at once (the engine's sequence groups, every rank
  // alike); with more than one, no rank waits for its sends at the end of a step, and world
  // rank 0 submits steps and collects their logits later (submit/collect).
  static Result<std::unique_ptr<PipelineBackend>> create(std::unique_ptr<model::StageForward> stage,
                                                         Communicator& world, PipelinePlace place,
                                                         int micro_batches,
                                                         DeviceLinksFactory device_links = {},
                                                         int groups = 1);
  ~PipelineBackend() override;

  const model::ModelSpec& spec() const noexcept override { return stage_->spec(); }
  int num_pages() const noexcept override { return stage_->num_pages(); }
  // On world rank 0 `logits` gets the step's logits; elsewhere it is left empty.
  Result<void> forward(const model::StepBatch& batch, std::vector<float>& logits) override;
  // On world rank 0 of GPU stages, the engine samples on rank 0's GPU: launch() runs the step
  // and leaves its logits in the stage's sampler (over NCCL they never reach the host),
  // sample() samples them. WEFT_PP_DEVICE_SAMPLING=0 keeps the host sampler, for comparisons.
  bool samples_on_device() const noexcept override;
  Result<void> launch(const model::StepBatch& batch) override;
  Result<void> sample(const model::DeviceSamplingInput& input,
                      model::DeviceSamplingOutput& output) override {
    return stage_->sample(input, output);
  }
  // World rank 0 with groups > 1: submit() runs stage 0 of a step and sends it on, collect()
  // receives the oldest submitted step's logits from the last stage (on_device: into the
  // stage's sampler, as launch() leaves them). So stage 0 runs one group's step while the
  // later stages run the steps submitted before it. GPU stages over NCCL enqueue the step and
  // its logits' receive into a buffer of its own (DeviceStageLinks::forward_deferred), so the
  // host waits only in collect().
  int steps_in_flight() const noexcept override { return groups_; }
  Result<void> submit(const model::StepBatch& batch) override;
  Result<void> collect(std::vector<float>& logits, bool on_device) override;
  // What carries the stages' messages, for logs and tests: the links' description once made
  // (at the first step), else "host buffers over <world>".
  std::string transport() const;

 private:
  PipelineBackend(std::unique_ptr<model::StageForward> stage, Communicator& world,
                  PipelinePlace place, int micro_batches, DeviceLinksFactory device_links,
                  int groups)
      : stage_(std::move(stage)),
        world_(world),
        place_(place),
        micro_batches_(micro_batches),
        groups_(groups),
        make_links_(std::move(device_links)) {}

  // The stage's tensor-parallel group (split at the first step) is declared before the stage,
  // so it outlives the stage: a GPU stage's NCCL communicator was bootstrapped over it.
  std::unique_ptr<Communicator> tensor_group_;
  std::unique_ptr<model::StageForward> stage_;
  Communicator& world_;
  PipelinePlace place_;
  int micro_batches_;
  int groups_;
  DeviceLinksFactory make_links_;  // cleared once asked
  // Destroyed before the stage (declared after it): the links wait for their streams.
  std::unique_ptr<DeviceStageLinks> links_;
  Result<void> step(const model::StepBatch& batch, std::vector<float>& logits,
                    bool logits_on_device);
  // The batch checked and cut into micro-batches (the group split and the links made at the
  // first step); then this rank's layers over them, each sent on (the last stage's logits
  // appended to `logits` on world rank 0, sent to it elsewhere).
  Result<std::vector<model::StepBatch>> begin_step(const model::StepBatch& batch);
  // Completes this rank's sends over the world before a step whose host waits are CUDA waits
  // on other ranks' GPUs (NCCL links, or a GPU stage's NCCL tensor-parallel group); a no-op
  // elsewhere. Why: pipeline_backend.cpp, docs/notes/ppgroups_gpu.md.
  Result<void> deliver_sends_before_device_waits();
  Result<void> run_parts(const std::vector<model::StepBatch>& parts, std::vector<float>& logits);
  // World rank 0's submitted steps, oldest first: each part's logit rows still to receive, or
  // the logits themselves when they are here already (the NCCL path, a one-stage pipeline).
  struct InFlight {
    std::vector<int> part_rows;
    bool deferred = false;  // the links hold them (DeviceStageLinks::take_logits)
    bool have_logits = false;
    std::vector<float> logits;
    int rows = 0;
  };
  std::deque<InFlight> in_flight_;
  std::vector<float> in_, out_, received_, launched_;
};

}  // namespace weft::parallel
