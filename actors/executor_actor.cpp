#include "actors/executor_actor.hpp"

namespace weft::actors {

ExecutorActor::ExecutorActor(const asio::any_io_executor& executor, const model::Model& model,
                             model::KvLayout layout, int num_pages, unsigned cpu_threads)
    : Actor(executor), model_(model), kv_(layout, num_pages), pool_(cpu_threads) {}

StepLogits ExecutorActor::run_step(const model::StepBatch& batch) {
  StepLogits out;
  auto ok = model_.forward(batch, kv_, out.values, pool_);
  if (!ok) throw ok.error();
  out.rows = batch.logit_rows();
  out.vocab = model_.spec().vocab_size;
  return out;
}

}  // namespace weft::actors
