// The scheduler actor's mailbox and bookkeeping: setup, requests joining (their samples as
// siblings), cancel and shutdown, a sequence's end, the metrics. The step loop is in
// scheduler_actor_loop.cpp.
#include "actors/scheduler_actor.hpp"

#include <algorithm>
#include <boost/asio/co_spawn.hpp>

#include "actors/completion.hpp"
#include "runtime/scheduler/step_trace.hpp"

namespace weft::actors {

SchedulerActor::SchedulerActor(KvAllocatorActor& kv_allocator, sched::SchedulerConfig config,
                               ExecutorActor& executor_actor, SamplerActor& sampler,
                               DetokenizerActor& detokenizer, ConstraintActor& constraint,
                               std::vector<std::int32_t> eos_ids)
    : Actor(kv_allocator.strand()),
      scheduler_(config, kv_allocator.pool()),
      executor_(executor_actor),
      sampler_(sampler),
      detokenizer_(detokenizer),
      constraint_(constraint),
      eos_ids_(std::move(eos_ids)),
      // Never re-armed: cancel() wakes every waiter, and one waiter re-arming would cancel
      // another's wait (the sequence groups' loops wait on them together).
      wake_(strand(), asio::steady_timer::time_point::max()),
      masks_ready_(strand(), asio::steady_timer::time_point::max()),
      turn_(strand(), asio::steady_timer::time_point::max()) {
  metrics_.kv_pages_total = config.num_pages;
}

void SchedulerActor::set_groups(int groups) {
  groups_ = std::max(1, groups);
  scheduler_.set_groups(groups_);
  group_state_.assign(static_cast<std::size_t>(groups_), GroupState::kBusy);
}

void SchedulerActor::set_step_trace(std::unique_ptr<std::ostream> out) {
  *out << sched::step_trace_header(scheduler_.config(), "engine") << '\n';
  step_trace_ = std::move(out);
}

void SchedulerActor::start() {
  post([this] {
    if (started_) return;
    started_ = true;
    loops_ = groups_;
    for (int g = 0; g < groups_; ++g) {
      asio::co_spawn(strand(), loop(groups_ > 1 ? g : -1), [](std::exception_ptr error) {
        if (error) detail::report_unhandled_exception(error, "scheduler loop");
      });
    }
  });
}

void SchedulerActor::add_request(std::uint64_t id, std::vector<std::int32_t> prompt,
                                 SamplingParams params, std::shared_ptr<RequestStream> stream,
                                 bool constrained) {
  if (stopping_) throw Error(ErrorCode::kShutdown, "the engine is shutting down");
  if (params.beam_width > 1) {
    add_beam_request(id, std::move(prompt), params, std::move(stream));
    wake_.cancel();
    return;
  }
  const int prompt_len = static_cast<int>(prompt.size());
  auto added = scheduler_.add(id, std::move(prompt), params.max_tokens);
  if (!added) throw added.error();
  const bool speculate = speculator_ && params.speculate != "off" && !constrained &&
                         params.repetition_penalty == 1.0f && params.presence_penalty == 0.0f &&
                         params.frequency_penalty == 0.0f && params.mirostat == 0 &&
                         params.fsd == sampling::Fsd::kOff && params.beam_width <= 1;
  add_samples(id, params, stream, prompt_len, constrained, speculate);
}

void SchedulerActor::add_samples(std::uint64_t id, const SamplingParams& params,
                                 const std::shared_ptr<RequestStream>& stream, int prompt_len,
                                 bool constrained, bool speculate) {
  const int n = std::max(1, params.n);
  std::vector<std::uint64_t>& ids = samples_[id];
  ids.push_back(id);
  for (int i = 1; i < n; ++i) {
    auto sibling = scheduler_.add_sibling(id + static_cast<std::uint64_t>(i), id);
    if (!sibling) {
      for (std::uint64_t added_id : ids)
        scheduler_.remove(added_id);
      samples_.erase(id);
      throw sibling.error();
    }
    ids.push_back(id + static_cast<std::uint64_t>(i));
  }
  for (int i = 0; i < n; ++i) {
    live_.emplace(id + static_cast<std::uint64_t>(i),
                  LiveRequest{stream, params, prompt_len, i, id, constrained, speculate});
  }
  metrics_.prompt_tokens += static_cast<std::uint64_t>(prompt_len);
  wake_.cancel();  // the loop may be idle
}

void SchedulerActor::cancel(std::uint64_t id) {
  post([this, id] {
    auto it = samples_.find(id);
    if (it == samples_.end()) return;  // unknown or finished: a no-op
    const std::vector<std::uint64_t> ids = it->second;
    for (std::uint64_t seq : ids)
      finish(seq, FinishReason::kCancelled);
  });
}

void SchedulerActor::shutdown(asio::any_completion_handler<void(std::exception_ptr)> handler) {
  post([this, handler = std::move(handler)]() mutable {
    if (stopped_ || !started_) {
      stopping_ = true;
      stopped_ = true;
      while (!live_.empty())
        finish(live_.begin()->first, FinishReason::kShutdown);
      complete(std::move(handler), strand().get_inner_executor(), std::exception_ptr());
      return;
    }
    stopping_ = true;
    shutdown_waiters_.push_back(std::move(handler));
    wake_.cancel();
  });
}

bool SchedulerActor::is_stop_token(const LiveRequest& request, std::int32_t token) const {
  const auto& stops = request.params.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), token) != stops.end()) return true;
  return !request.params.ignore_eos &&
         std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end();
}

void SchedulerActor::finish(std::uint64_t id, FinishReason reason, std::string error,
                            int completion_tokens) {
  auto it = live_.find(id);
  if (it == live_.end()) {
    // A beam forked inside the engine ends its whole request (a failed step, a row in error).
    if (auto b = beam_of_.find(id); b != beam_of_.end()) {
      const std::uint64_t request = b->second;
      drop_beams(request);
      if (auto r = samples_.find(request); r != samples_.end()) {
        for (std::uint64_t slot : std::vector<std::uint64_t>(r->second))
          finish(slot, reason, error);
      }
    }
    return;
  }
  if (beam_groups_.count(it->second.request_id) != 0) {
    // Before the search is done, one sample ending ends them all.
    const std::uint64_t request = it->second.request_id;
    drop_beams(request);
    if (auto r = samples_.find(request); r != samples_.end()) {
      for (std::uint64_t slot : std::vector<std::uint64_t>(r->second))
        if (slot != id) finish(slot, reason, error);
    }
    it = live_.find(id);
    if (it == live_.end()) return;
  }
  if (it->second.ending) {
    // A stop string ended it while a step in flight still ran it: whatever ends it now (that
    // step done, a cancel, a failed step) ends it as the stop string did.
    reason = *it->second.ending;
    error = it->second.ending_error;
  }
  const sched::Sequence* seq = scheduler_.find(id);
  const LiveRequest& live = it->second;
  Event event;
  event.kind = Event::Kind::kFinal;
  event.index = live.index;
  event.finish_reason = reason;
  event.usage.prompt_tokens = live.prompt_len;
  event.usage.completion_tokens = completion_tokens >= 0 ? completion_tokens
                                  : live.final_tokens >= 0
                                      ? live.final_tokens
                                      : (seq != nullptr ? seq->generated() : 0);
  event.usage.cached_tokens =
      live.final_tokens >= 0 ? live.final_cached : (seq != nullptr ? seq->cached_tokens : 0);
  event.error = std::move(error);
  scheduler_.remove(id);  // frees the KV pages now
  if (speculator_) speculator_->forget(id);
  sampler_.remove(id);
  detokenizer_.remove(id);
  if (it->second.constrained) constraint_.remove(id);
  // The final event follows the detokenizer's last delta: both come from this strand's
  // sequence of steps, and the detokenizer pushed its deltas before replying.
  it->second.stream->push(std::move(event));
  if (auto r = samples_.find(it->second.request_id); r != samples_.end()) {
    std::erase(r->second, id);
    if (r->second.empty()) samples_.erase(r);
  }
  live_.erase(it);
  switch (reason) {
    case FinishReason::kStop:
      ++metrics_.finished_stop;
      break;
    case FinishReason::kLength:
      ++metrics_.finished_length;
      break;
    case FinishReason::kCancelled:
      ++metrics_.finished_cancelled;
      break;
    case FinishReason::kShutdown:
      ++metrics_.finished_shutdown;
      break;
    case FinishReason::kError:
      ++metrics_.finished_error;
      break;
  }
}

EngineMetrics SchedulerActor::snapshot() const {
  EngineMetrics m = metrics_;
  m.running = scheduler_.running();
  m.waiting = scheduler_.waiting();
  m.kv_pages_used = scheduler_.pool().held_pages();
  m.kv_pages_peak = scheduler_.pool().peak_used_pages();
  m.preemptions = scheduler_.preemptions();
  m.kv_compressions = scheduler_.compressions();
  m.kv_compressed_pages = scheduler_.compressed_pages();
  const sched::PrefixCacheStats cache = scheduler_.prefix_cache_stats();
  m.kv_pages_cached = cache.cached_pages;
  m.prefix_cache_query_tokens = cache.query_tokens;
  m.prefix_cache_hit_tokens = cache.hit_tokens;
  m.prefix_cache_evictions = cache.evictions;
  m.mask_compute_us = mask_compute_ns_ / 1000;
  m.mask_wait_us = mask_wait_ns_ / 1000;
  m.constraint_accept_us = accept_ns_ / 1000;
  m.forward_us = forward_ns_ / 1000;
  m.constrained_forward_us = constrained_forward_ns_ / 1000;
  StepPhaseTimes& p = m.step_phases;
  p.plan_us = phases_.plan / 1000;
  p.batch_us = phases_.batch / 1000;
  p.launch_us = phases_.launch / 1000;
  p.launch_prepare_us = phases_.launch_prepare / 1000;
  p.mask_wait_us = phases_.mask_wait / 1000;
  p.detokenize_wait_us = phases_.detokenize_wait / 1000;
  p.sampler_prepare_us = phases_.sampler_prepare / 1000;
  p.sample_us = phases_.sample / 1000;
  p.sampler_finish_us = phases_.sampler_finish / 1000;
  p.complete_us = phases_.complete / 1000;
  p.accept_wait_us = phases_.accept_wait / 1000;
  p.finish_us = phases_.finish / 1000;
  p.step_us = phases_.step / 1000;
  p.gap_us = phases_.gap / 1000;
  p.overlapped_steps = overlapped_steps_;
  p.dropped_tokens = dropped_tokens_;
  const sched::SpeculationStats& spec = scheduler_.speculation_stats();
  m.speculative_verifications = spec.verifications;
  m.speculative_draft_tokens = spec.draft_tokens;
  m.speculative_accepted_tokens = spec.accepted_tokens;
  return m;
}

}  // namespace weft::actors
