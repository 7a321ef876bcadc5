#pragma once
// The executor: owns the model's weights and the KV storage of one device and runs forward
// steps, one at a time, on a thread of its own (a step blocks). The device is a
// model::ForwardBackend: the CPU (Model + KvCache + thread pool) or a GPU (CudaModel, one
// executor per GPU), behind the same messages.

#include <memory>
#include <vector>

#include "runtime/model/forward_backend.hpp"
#include "runtime/model/step_batch.hpp"
#include "weft/actor.hpp"

namespace weft::actors {

// Logits of one step: one row of `vocab` floats per slice that has tokens, in slice order.
struct StepLogits {
  std::vector<float> values;
  int rows = 0;
  int vocab = 0;
};

class ExecutorActor : public Actor {
 public:
  // The CPU backend. `model` must outlive the actor. `executor` should be a dedicated thread's.
  ExecutorActor(const asio::any_io_executor& executor, const model::Model& model,
                model::KvLayout layout, int num_pages, unsigned cpu_threads);
  // Any backend, e.g. a CudaModel for one GPU.
  ExecutorActor(const asio::any_io_executor& executor,
                std::unique_ptr<model::ForwardBackend> backend);

  // Runs one step; the reply carries its logits. A bad batch is an error reply.
  template <class Token>
  auto run(model::StepBatch batch, Token&& token) {
    return ask([this, batch = std::move(batch)] { return run_step(batch); },
               std::forward<Token>(token));
  }

 private:
  StepLogits run_step(const model::StepBatch& batch);

  std::unique_ptr<model::ForwardBackend> backend_;
};

}  // namespace weft::actors
