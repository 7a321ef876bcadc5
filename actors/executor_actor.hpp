#pragma once
// The executor: owns the model's weights and the KV storage of one device and runs forward
// steps, one at a time, on a thread of its own (a step blocks). CPU here; the CUDA issue adds
// one per GPU behind the same messages.

#include <memory>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/model.hpp"
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
  // `model` must outlive the actor. `executor` should be a dedicated thread's.
  ExecutorActor(const asio::any_io_executor& executor, const model::Model& model,
                model::KvLayout layout, int num_pages, unsigned cpu_threads);

  // Runs one step; the reply carries its logits. A bad batch is an error reply.
  template <class Token>
  auto run(model::StepBatch batch, Token&& token) {
    return ask([this, batch = std::move(batch)] { return run_step(batch); },
               std::forward<Token>(token));
  }

 private:
  StepLogits run_step(const model::StepBatch& batch);

  const model::Model& model_;
  model::KvCache kv_;
  cpu::ThreadPool pool_;
};

}  // namespace weft::actors
