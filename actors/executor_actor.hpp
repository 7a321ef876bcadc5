#pragma once
// The executor: owns the model's weights and the KV storage of one device and runs forward
// steps, one at a time, on a thread of its own (a step blocks). The device is a
// model::ForwardBackend: the CPU (Model + KvCache + thread pool) or a GPU (CudaModel, one
// executor per GPU), behind the same messages.

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/model/forward_backend.hpp"
#include "runtime/model/step_batch.hpp"
#include "weft/actor.hpp"

namespace weft::actors {

// Logits of one step: one row of `vocab` floats per slice that has tokens, in slice order.
// on_device: a backend that samples on its device kept them there (values is empty); the
// step's rows are then sampled through ExecutorActor::sample.
struct StepLogits {
  std::vector<float> values;
  int rows = 0;
  int vocab = 0;
  bool on_device = false;
  // The backend's host-side preparation of the step's inputs
  // (ForwardBackend::last_prepare_ns; 0 where it does not measure it).
  std::uint64_t prepare_ns = 0;
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
    return ask([this, batch = std::move(batch)] { return run_step(batch, false); },
               std::forward<Token>(token));
  }

  // The same, except that a backend that samples on its device replies as soon as the step is
  // launched, leaving the logits there (on_device); sample() must then follow before the
  // next step. Other backends reply with the logits, as run() does.
  template <class Token>
  auto launch(model::StepBatch batch, Token&& token) {
    return ask([this, batch = std::move(batch)] { return run_step(batch, true); },
               std::forward<Token>(token));
  }

  // Steps in flight (a pipeline's sequence groups, docs/parallel.md): up to
  // steps_in_flight() steps may be submitted before the oldest is collected, in the order
  // submitted. submit() replies once this process's share of the step has run (a pipeline's
  // first stage); collect() replies with the oldest step's logits, left on the device (as
  // launch() leaves them) when keep_on_device and the backend samples there.
  int steps_in_flight() const noexcept { return backend_->steps_in_flight(); }
  template <class Token>
  auto submit(model::StepBatch batch, Token&& token) {
    return ask(
        [this, batch = std::move(batch)] {
          if (auto ok = backend_->submit(batch); !ok) throw ok.error();
          return batch.logit_rows();
        },
        std::forward<Token>(token));
  }
  template <class Token>
  auto collect(int rows, bool keep_on_device, Token&& token) {
    return ask([this, rows, keep_on_device] { return collect_step(rows, keep_on_device); },
               std::forward<Token>(token));
  }

  // Samples rows of the step launch() left on the device; waits for the results.
  template <class Token>
  auto sample(model::DeviceSamplingInput input, Token&& token) {
    return ask(
        [this, input = std::move(input)] {
          model::DeviceSamplingOutput out;
          if (auto ok = backend_->sample(input, out); !ok) throw ok.error();
          return out;
        },
        std::forward<Token>(token));
  }

 private:
  StepLogits run_step(const model::StepBatch& batch, bool keep_on_device);
  StepLogits collect_step(int rows, bool keep_on_device);

  std::unique_ptr<model::ForwardBackend> backend_;
};

}  // namespace weft::actors
