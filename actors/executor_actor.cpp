#include "actors/executor_actor.hpp"

namespace weft::actors {

ExecutorActor::ExecutorActor(const asio::any_io_executor& executor, const model::Model& model,
                             model::KvLayout layout, int num_pages, unsigned cpu_threads)
    : ExecutorActor(executor, std::make_unique<model::CpuForwardBackend>(model, layout, num_pages,
                                                                         cpu_threads)) {}

ExecutorActor::ExecutorActor(const asio::any_io_executor& executor,
                             std::unique_ptr<model::ForwardBackend> backend)
    : Actor(executor), backend_(std::move(backend)) {}

StepLogits ExecutorActor::run_step(const model::StepBatch& batch, bool keep_on_device) {
  StepLogits out;
  out.on_device = keep_on_device && backend_->samples_on_device();
  auto ok = out.on_device ? backend_->launch(batch) : backend_->forward(batch, out.values);
  if (!ok) throw ok.error();
  out.prepare_ns = backend_->last_prepare_ns();
  out.rows = batch.logit_rows();
  out.vocab = backend_->spec().vocab_size;
  return out;
}

StepLogits ExecutorActor::collect_step(int rows, bool keep_on_device) {
  StepLogits out;
  out.on_device = keep_on_device && backend_->samples_on_device();
  if (auto ok = backend_->collect(out.values, out.on_device); !ok) throw ok.error();
  out.rows = rows;
  out.vocab = backend_->spec().vocab_size;
  return out;
}

}  // namespace weft::actors
