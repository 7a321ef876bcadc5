#pragma once
// Tensor parallelism behind one engine (docs/parallel.md). Rank 0 runs the whole engine —
// scheduler, sampler, detokenizer — and its executor's backend is a TensorParallelLeader: it
// sends each step's batch to the other ranks, then runs its own shard; the all-reduces
// inside the forward pass join the ranks. The other ranks run follow_tensor_parallel_leader:
// they receive each batch and run their shard of it, and never sample. Every rank's KV pool
// has the leader's page count, so the scheduler's page ids are valid everywhere.

#include <functional>
#include <memory>

#include "runtime/model/forward_backend.hpp"
#include "runtime/parallel/communicator.hpp"

namespace weft::parallel {

class TensorParallelLeader final : public model::ForwardBackend {
 public:
  // `local` runs rank 0's shard with `comm` (host buffers); `comm` must outlive this. Tells
  // the followers the pool's page count, so it must be made after they started following.
  // point_to_point: each message goes to every follower by send() (which returns at once)
  // instead of a broadcast, so the leader never waits for a follower still busy with an
  // earlier step (a pipeline with steps in flight); the followers must be told alike.
  static Result<std::unique_ptr<TensorParallelLeader>> create(
      std::unique_ptr<model::ForwardBackend> local, Communicator& comm,
      bool point_to_point = false);
  // Tells the followers to stop.
  ~TensorParallelLeader() override;
  TensorParallelLeader(const TensorParallelLeader&) = delete;
  TensorParallelLeader& operator=(const TensorParallelLeader&) = delete;

  const model::ModelSpec& spec() const noexcept override { return local_->spec(); }
  int num_pages() const noexcept override { return local_->num_pages(); }
  Result<void> forward(const model::StepBatch& batch, std::vector<float>& logits) override;
  // A backend that samples on its device (a GPU) keeps doing so: launch() sends the step
  // like forward(), then launches the local shard's.
  bool samples_on_device() const noexcept override { return local_->samples_on_device(); }
  Result<void> launch(const model::StepBatch& batch) override;
  Result<void> sample(const model::DeviceSamplingInput& input,
                      model::DeviceSamplingOutput& output) override {
    return local_->sample(input, output);
  }
  // Steps in flight (a pipeline's groups): submit() sends the step like forward(), then
  // submits the local share; collect() is the local backend's.
  int steps_in_flight() const noexcept override { return local_->steps_in_flight(); }
  Result<void> submit(const model::StepBatch& batch) override;
  Result<void> collect(std::vector<float>& logits, bool on_device) override {
    return local_->collect(logits, on_device);
  }

 private:
  Result<void> send(const model::StepBatch& batch);
  TensorParallelLeader(std::unique_ptr<model::ForwardBackend> local, Communicator& comm,
                       bool point_to_point)
      : local_(std::move(local)), comm_(comm), point_to_point_(point_to_point) {}
  std::unique_ptr<model::ForwardBackend> local_;
  Communicator& comm_;
  bool point_to_point_;
};

// For a leader that fails before it has a pool: the followers' loops return.
void stop_tensor_parallel_followers(Communicator& comm, bool point_to_point = false);

// A follower's loop: waits for the leader's page count, makes its backend with
// make_backend(num_pages), then runs every batch the leader sends until the leader stops
// (a backend that samples on its device launches each step and waits for it, its logits left
// there unread).
// A step that fails here failed alike on the leader (the same checks on the same batch), so
// the loop goes on; an error of the communicator or of make_backend ends it.
// point_to_point: the leader sends its messages point to point (create()'s flag, alike).
Result<void> follow_tensor_parallel_leader(
    Communicator& comm,
    const std::function<Result<std::unique_ptr<model::ForwardBackend>>(int num_pages)>&
        make_backend,
    bool point_to_point = false);

}  // namespace weft::parallel
