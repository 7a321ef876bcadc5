#pragma once
// The scheduler actor owns every live request and drives the step loop on its strand: plan a
// step (runtime/scheduler), run it on the executor, sample the new tokens, hand them to the
// detokenizer, decide which requests finish. Requests join and leave between steps; cancel
// frees a request's KV pages at once.

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "actors/detokenizer_actor.hpp"
#include "actors/executor_actor.hpp"
#include "actors/sampler_actor.hpp"
#include "runtime/scheduler/scheduler.hpp"
#include "weft/actor.hpp"
#include "weft/engine.hpp"

namespace weft::actors {

class SchedulerActor : public Actor {
 public:
  SchedulerActor(const asio::any_io_executor& executor, sched::SchedulerConfig config,
                 ExecutorActor& executor_actor, SamplerActor& sampler,
                 DetokenizerActor& detokenizer, std::vector<std::int32_t> eos_ids);

  // Starts the step loop (once).
  void start();

  // Queues a tokenized request as params.n sequences with ids id .. id + n - 1 (the samples
  // after the first share its prompt pages); the reply fails if the scheduler refuses it (it
  // could never fit the KV pool) or the engine is stopping.
  template <class Token>
  auto add(std::uint64_t id, std::vector<std::int32_t> prompt, SamplingParams params,
           std::shared_ptr<RequestStream> stream, Token&& token) {
    return ask(
        [this, id, prompt = std::move(prompt), params = std::move(params),
         stream = std::move(stream)]() mutable {
          add_request(id, std::move(prompt), std::move(params), std::move(stream));
        },
        std::forward<Token>(token));
  }

  // Cancels every sample of the request `id` (the id its stream carries).
  void cancel(std::uint64_t id);

  template <class Token>
  auto metrics(Token&& token) {
    return ask([this] { return snapshot(); }, std::forward<Token>(token));
  }

  // Live requests end with kShutdown; completes once the loop has exited.
  void shutdown(asio::any_completion_handler<void(std::exception_ptr)> handler);

 private:
  struct LiveRequest {
    std::shared_ptr<RequestStream> stream;
    SamplingParams params;
    int prompt_len = 0;
    int index = 0;                 // which sample of its request
    std::uint64_t request_id = 0;  // the first sample's id
  };

  asio::awaitable<void> loop();
  void add_request(std::uint64_t id, std::vector<std::int32_t> prompt, SamplingParams params,
                   std::shared_ptr<RequestStream> stream);
  void finish(std::uint64_t id, FinishReason reason, std::string error = {});
  bool is_stop_token(const LiveRequest& request, std::int32_t token) const;
  EngineMetrics snapshot() const;

  sched::Scheduler scheduler_;
  ExecutorActor& executor_;
  SamplerActor& sampler_;
  DetokenizerActor& detokenizer_;
  std::vector<std::int32_t> eos_ids_;
  std::unordered_map<std::uint64_t, LiveRequest> live_;                    // by sequence id
  std::unordered_map<std::uint64_t, std::vector<std::uint64_t>> samples_;  // request -> sequences
  asio::steady_timer wake_;
  bool started_ = false;
  bool stopping_ = false;
  bool stopped_ = false;
  std::vector<asio::any_completion_handler<void(std::exception_ptr)>> shutdown_waiters_;
  EngineMetrics metrics_;
};

}  // namespace weft::actors
