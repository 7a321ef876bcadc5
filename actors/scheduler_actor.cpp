#include "actors/scheduler_actor.hpp"

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "actors/completion.hpp"
#include "runtime/scheduler/step_trace.hpp"
#include "weft/log.hpp"

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

void SchedulerActor::set_speculation(std::unique_ptr<speculative::Speculator> speculator,
                                     sched::SpeculationConfig config, int width) {
  speculator_ = std::move(speculator);
  speculation_width_ = std::max(1, width);
  if (speculator_) {
    config.propose = [this](const sched::Sequence& s, int max_nodes, int max_depth) {
      return propose(s, max_nodes, max_depth);
    };
    // A step's proposals together: a draft model runs one forward per depth for them all.
    config.propose_batch = [this](const std::vector<sched::SpeculationConfig::Ask>& asks) {
      return propose_batch(asks);
    };
  }
  scheduler_.set_speculation(std::move(config));
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
  const sched::Sequence* seq = scheduler_.find(id);
  Event event;
  event.kind = Event::Kind::kFinal;
  event.index = it->second.index;
  event.finish_reason = reason;
  event.usage.prompt_tokens = it->second.prompt_len;
  event.usage.completion_tokens =
      completion_tokens >= 0 ? completion_tokens : (seq != nullptr ? seq->generated() : 0);
  event.usage.cached_tokens = seq != nullptr ? seq->cached_tokens : 0;
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

std::optional<speculative::ProposalLimits> SchedulerActor::proposal_limits(const sched::Sequence& s,
                                                                           int max_nodes,
                                                                           int max_depth) const {
  auto it = live_.find(s.id);
  if (it == live_.end() || !it->second.speculate) return std::nullopt;
  speculative::ProposalLimits limits;
  limits.max_nodes = max_nodes;
  limits.max_depth = max_depth;
  if (const int cap = it->second.params.spec_tokens; cap > 0) {  // the request's own depth
    limits.max_depth = std::min(max_depth, cap);
    limits.max_nodes = std::min(max_nodes, cap * speculation_width_);
  }
  limits.width = speculation_width_;
  limits.temperature = it->second.params.temperature;
  limits.seed = it->second.params.seed.value_or(s.id) ^ static_cast<std::uint64_t>(s.generated());
  return limits;
}

speculative::DraftTree SchedulerActor::propose(const sched::Sequence& s, int max_nodes,
                                               int max_depth) {
  const auto limits = proposal_limits(s, max_nodes, max_depth);
  if (!limits) return {};
  return speculator_->propose(s.id, s.tokens, *limits);
}

std::vector<speculative::DraftTree> SchedulerActor::propose_batch(
    const std::vector<sched::SpeculationConfig::Ask>& asks) {
  std::vector<speculative::DraftTree> trees(asks.size());
  std::vector<speculative::ProposalRequest> requests;
  std::vector<std::size_t> at;  // the ask of each request
  for (std::size_t k = 0; k < asks.size(); ++k) {
    const sched::Sequence& s = *asks[k].sequence;
    if (auto limits = proposal_limits(s, asks[k].max_nodes, asks[k].max_depth)) {
      requests.push_back({s.id, s.tokens, *limits});
      at.push_back(k);
    }
  }
  if (requests.empty()) return trees;
  auto proposed = speculator_->propose_batch(requests);
  for (std::size_t r = 0; r < at.size() && r < proposed.size(); ++r)
    trees[at[r]] = std::move(proposed[r]);
  return trees;
}

sched::VerifiedDraft SchedulerActor::cut_verified(const VerifyOutcome& o) const {
  sched::VerifiedDraft d;
  auto it = live_.find(o.id);
  const sched::Sequence* seq = scheduler_.find(o.id);
  if (!o.error.empty() || it == live_.end() || seq == nullptr) return d;
  const int room = std::max(0, it->second.params.max_tokens - seq->generated());
  for (const auto& t : o.tokens) {
    if (static_cast<int>(d.tokens.size()) >= room) break;
    d.tokens.push_back(t.id);
    if (is_stop_token(it->second, t.id)) break;
  }
  d.accepted = o.accepted;
  return d;
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
  const sched::SpeculationStats& spec = scheduler_.speculation_stats();
  m.speculative_verifications = spec.verifications;
  m.speculative_draft_tokens = spec.draft_tokens;
  m.speculative_accepted_tokens = spec.accepted_tokens;
  return m;
}

asio::awaitable<void> SchedulerActor::detokenize(std::vector<NewToken> tokens) {
  if (tokens.empty()) co_return;
  // A failure here must not end the loop: every live request would wait forever.
  std::vector<std::uint64_t> ids;
  for (const auto& t : tokens)
    ids.push_back(t.id);
  std::vector<std::uint64_t> stopped;
  std::string detokenize_error;
  try {
    stopped = co_await detokenizer_.process(std::move(tokens), asio::use_awaitable);
  } catch (const std::exception& e) {
    detokenize_error = std::string("detokenizer: ") + e.what();
  }
  if (!detokenize_error.empty()) {
    log_error(detokenize_error);
    for (std::uint64_t id : ids)
      finish(id, FinishReason::kError, detokenize_error);
  }
  for (std::uint64_t id : stopped)
    finish(id, FinishReason::kStop);
}

asio::awaitable<void> SchedulerActor::loop(int group) {
  for (;;) {
    if (stopping_) break;
    set_group_state(group, GroupState::kBusy);
    sched::StepPlan plan = group < 0 ? scheduler_.plan_step() : scheduler_.plan_step(group);
    if (plan.empty()) {
      set_group_state(group, GroupState::kIdle);
      boost::system::error_code ec;
      co_await wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    if (step_trace_) {
      const auto now = std::chrono::steady_clock::now();
      if (!step_trace_start_) step_trace_start_ = now;
      const double t_ms =
          std::chrono::duration<double, std::milli>(now - *step_trace_start_).count();
      *step_trace_ << sched::to_json_line(
                          sched::describe_step(scheduler_, plan, step_trace_steps_++, t_ms))
                   << '\n';
    }
    model::StepBatch batch;
    batch.tokens = plan.tokens;
    batch.positions = plan.positions;
    std::vector<SampleRow> rows;
    std::vector<std::uint64_t> constrained_ids;
    std::vector<std::size_t> constrained_rows;
    std::vector<VerifyRow> verify;  // draft slices: every token's logits, verified
    int next_row = 0;
    for (std::size_t i = 0; i < plan.slices.size(); ++i) {
      const auto& s = plan.slices[i];
      batch.sequences.push_back({s.token_begin, s.token_count, s.page_table, false});
      batch.sequences.back().verify = s.decode_rows;
      batch.sequences.back().slot_offset = s.slot_offset;
      batch.sequences.back().compress_evict = s.compress_evict;
      batch.sequences.back().compress_window = s.compress_window;
      batch.sequences.back().cross_page_table = s.cross_page_table;
      batch.sequences.back().cross_length = s.cross_length;
      batch.sequences.back().encoder_tokens = s.encoder_tokens;
      if (s.draft) {
        model::SequenceSlice& slice = batch.sequences.back();
        slice.all_logits = true;
        slice.verify = true;
        // A catch-up before the root, if any, then the root: a chain of decode rows.
        const int root = s.root_position() - s.first_position;
        if (!s.draft->is_chain()) {  // a chain runs as an ordinary causal chunk
          for (int i = 0; i <= root; ++i)
            slice.tree_parent.push_back(i - 1);
          for (auto parent : s.draft->parent)
            slice.tree_parent.push_back(parent < 0 ? root : parent + root + 1);
          slice.tree_first_slot = s.first_position;
        }
        verify.push_back({s.id, next_row + root, s.draft});
        next_row += s.token_count;
        continue;
      }
      const int row = next_row++;
      if (!s.samples) continue;
      if (auto it = live_.find(s.id); it != live_.end() && it->second.constrained) {
        constrained_ids.push_back(s.id);
        constrained_rows.push_back(rows.size());
      }
      rows.push_back({s.id, row, {}, beam_row_k(s.id)});
    }
    ++metrics_.steps;

    std::vector<SampleOutcome> outcomes;
    std::vector<VerifyOutcome> verified;
    std::exception_ptr step_error;
    // The masks are asked for first so that, on a multi-threaded executor, the constraint
    // actor may start at once; either way they are computed while the executor's own thread
    // runs the forward pass launched just below. The reply is posted back to this strand.
    std::shared_ptr<PendingMasks> pending;
    if (!constrained_ids.empty()) {
      pending = std::make_shared<PendingMasks>();
      ++metrics_.constrained_steps;
      constraint_.masks(std::move(constrained_ids), [this, pending](std::exception_ptr e,
                                                                    StepMasks masks) mutable {
        asio::post(strand(), [this, pending, e, masks = std::move(masks)]() mutable {
          pending->error = e;
          pending->masks = std::move(masks);
          pending->done = true;
          masks_ready_.cancel();
        });
      });
    }
    const auto launched = std::chrono::steady_clock::now();
    std::vector<std::uint32_t> step_masks;  // device sampling: every constrained row's mask
    try {
      // Sampled verification reads every row of a draft slice on the host; greedy
      // verification, on a backend that samples on its device, only the device's picks.
      // (Not a conditional expression: GCC's coroutines mishandle a co_await inside one.)
      const bool greedy_verify =
          std::all_of(verify.begin(), verify.end(), [this](const VerifyRow& v) {
            auto it = live_.find(v.id);
            return it != live_.end() && it->second.params.temperature == 0.0f;
          });
      StepLogits logits;
      if (group >= 0) {
        // Sequence groups: submitted, then collected in turn (scheduler_actor_groups.cpp).
        logits = co_await run_in_flight(std::move(batch), group);
      } else if (verify.empty() || greedy_verify) {
        logits = co_await executor_.launch(std::move(batch), asio::use_awaitable);
      } else {
        logits = co_await executor_.run(std::move(batch), asio::use_awaitable);
      }
      const auto logits_ready = std::chrono::steady_clock::now();
      // On a device sampler the forward pass ends with the sampling reply (below).
      const auto account_forward = [&](std::chrono::steady_clock::time_point done) {
        const auto ns = static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(done - launched).count());
        forward_ns_ += ns;
        if (pending) constrained_forward_ns_ += ns;
      };
      if (!logits.on_device) account_forward(logits_ready);
      if (pending) {
        // Both must be ready before sampling: wait for whatever of the masks the forward
        // pass did not hide.
        while (!pending->done) {
          boost::system::error_code ec;
          co_await masks_ready_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        }
        mask_wait_ns_ +=
            static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                           std::chrono::steady_clock::now() - logits_ready)
                                           .count());
        if (pending->error) std::rethrow_exception(pending->error);
        mask_compute_ns_ += pending->masks.compute_ns;
        metrics_.masks_computed += static_cast<std::uint64_t>(pending->masks.computed);
        StepMasks& m = pending->masks;
        for (std::size_t k = 0; k < constrained_rows.size() && k < m.offsets.size(); ++k) {
          const std::int32_t at = m.offsets[k];
          if (at < 0) continue;
          if (logits.on_device) {
            rows[constrained_rows[k]].mask_offset = at;  // into the step's masks, uncopied
          } else {
            const auto begin = m.words.begin() + at;
            rows[constrained_rows[k]].allowed.assign(begin, begin + m.words_per_mask);
          }
        }
        if (logits.on_device) step_masks = std::move(m.words);
      }
      if (logits.on_device) {
        // The logits stay on the GPU: the sampler describes each row's draw, the executor
        // samples on the device, the sampler finishes the draws from the candidates.
        if (verify.empty()) {
          DeviceSamplePlan prepared = co_await sampler_.prepare(
              std::move(rows), logits.vocab, std::move(step_masks), asio::use_awaitable);
          model::DeviceSamplingInput input = std::move(prepared.input);
          model::DeviceSamplingOutput sampled =
              co_await executor_.sample(std::move(input), asio::use_awaitable);
          account_forward(std::chrono::steady_clock::now());
          outcomes = co_await sampler_.finish(std::move(prepared), std::move(sampled),
                                              asio::use_awaitable);
        } else {
          // Greedy draft slices: each node's row drawn greedily on the device beside the plain
          // rows; the trees are walked on the sampler's strand by those picks.
          DeviceSamplePlan prepared =
              co_await sampler_.prepare_step(std::move(rows), std::move(verify), logits.vocab,
                                             std::move(step_masks), asio::use_awaitable);
          model::DeviceSamplingInput input = std::move(prepared.input);
          model::DeviceSamplingOutput sampled =
              co_await executor_.sample(std::move(input), asio::use_awaitable);
          account_forward(std::chrono::steady_clock::now());
          StepOutcomes both = co_await sampler_.finish_step(std::move(prepared), std::move(sampled),
                                                            asio::use_awaitable);
          outcomes = std::move(both.sampled);
          verified = std::move(both.verified);
        }
      } else if (!verify.empty()) {
        StepOutcomes both = co_await sampler_.sample_and_verify(
            std::move(logits), std::move(rows), std::move(verify), asio::use_awaitable);
        outcomes = std::move(both.sampled);
        verified = std::move(both.verified);
      } else {
        outcomes =
            co_await sampler_.sample(std::move(logits), std::move(rows), asio::use_awaitable);
      }
    } catch (...) {
      step_error = std::current_exception();
    }
    // A failed forward pass must not leave the masks' callback pointing at a finished step.
    while (pending && !pending->done) {
      boost::system::error_code ec;
      co_await masks_ready_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    if (step_error) {
      std::string message = "forward step failed";
      try {
        std::rethrow_exception(step_error);
      } catch (const std::exception& e) {
        message = e.what();
      }
      log_error("step " + std::to_string(plan.step) + ": " + message);
      for (const auto& s : plan.slices)
        finish(s.id, FinishReason::kError, message);
      continue;
    }

    std::vector<std::int32_t> sampled;
    sampled.reserve(outcomes.size());
    for (const auto& o : outcomes)
      sampled.push_back(o.token ? o.token->id : -1);
    std::vector<sched::VerifiedDraft> drafts;
    for (const auto& v : verified)
      drafts.push_back(cut_verified(v));
    scheduler_.complete_step(plan, sampled, drafts);
    co_await advance_beams(outcomes);  // beam rows leave `outcomes` here

    // Constrained rows: the constraint actor advances the matchers by the sampled tokens (and
    // by the tokens the grammar forces after them: jump-forward, at most the output's
    // remaining budget) while the detokenizer turns the sampled tokens into text, each on its
    // own strand, so accepting costs the step loop nothing where detokenizing takes longer.
    // The verdicts come after: a second message to the detokenizer carries the forced tokens
    // and ends the outputs the grammar completed. The next step's masks are then computed
    // while it runs.
    std::shared_ptr<PendingAccept> accepting;
    {
      std::vector<AcceptedToken> accepted;
      for (const auto& o : outcomes) {
        auto it = live_.find(o.id);
        if (o.token && it != live_.end() && it->second.constrained) {
          const sched::Sequence* seq = scheduler_.find(o.id);
          const int left = seq != nullptr ? it->second.params.max_tokens - seq->generated() : 0;
          const int max_forced = is_stop_token(it->second, o.token->id) ? 0 : std::max(0, left);
          accepted.push_back({o.id, o.token->id, max_forced});
        }
      }
      if (!accepted.empty()) {
        accepting = std::make_shared<PendingAccept>();
        constraint_.accept(std::move(accepted), [this, accepting](std::exception_ptr e,
                                                                  AcceptResult result) mutable {
          asio::post(strand(), [this, accepting, e, result = std::move(result)]() mutable {
            accepting->error = e;
            accepting->result = std::move(result);
            accepting->done = true;
            masks_ready_.cancel();
          });
        });
      }
    }

    std::vector<NewToken> new_tokens;
    std::vector<std::pair<std::uint64_t, FinishReason>> finishing;
    for (const auto& o : outcomes) {
      auto it = live_.find(o.id);
      if (it == live_.end()) continue;  // cancelled while the step ran
      if (!o.token) {
        finish(o.id, FinishReason::kError, o.error);
        continue;
      }
      const bool stop = is_stop_token(it->second, o.token->id);
      const sched::Sequence* seq = scheduler_.find(o.id);
      const bool length = seq->generated() >= it->second.params.max_tokens;
      NewToken t;
      t.id = o.id;
      t.token.id = o.token->id;
      t.token.logprob = o.token->logprob;
      t.token.top = o.token->top;
      t.last = stop || length;
      new_tokens.push_back(std::move(t));
      metrics_.generated_tokens += 1;
      if (stop || length)
        finishing.emplace_back(o.id, stop ? FinishReason::kStop : FinishReason::kLength);
    }
    for (std::size_t k = 0; k < verified.size(); ++k) {
      const VerifyOutcome& v = verified[k];
      auto it = live_.find(v.id);
      if (it == live_.end()) continue;  // cancelled while the step ran
      if (!v.error.empty()) {
        finish(v.id, FinishReason::kError, v.error);
        continue;
      }
      const std::size_t count = drafts[k].tokens.size();
      const sched::Sequence* seq = scheduler_.find(v.id);
      const bool length = seq->generated() >= it->second.params.max_tokens;
      const bool stop = count > 0 && is_stop_token(it->second, v.tokens[count - 1].id);
      for (std::size_t j = 0; j < count; ++j) {
        NewToken t;
        t.id = v.id;
        t.token.id = v.tokens[j].id;
        t.token.logprob = v.tokens[j].logprob;
        t.token.top = v.tokens[j].top;
        new_tokens.push_back(std::move(t));
      }
      if (count > 0) new_tokens.back().last = stop || length;
      metrics_.generated_tokens += count;
      if (stop || length)
        finishing.emplace_back(v.id, stop ? FinishReason::kStop : FinishReason::kLength);
    }
    co_await detokenize(std::move(new_tokens));

    if (accepting) {
      while (!accepting->done) {
        boost::system::error_code ec;
        co_await masks_ready_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
      if (accepting->error) {
        std::string message = "constraint: accepting the sampled tokens failed";
        try {
          std::rethrow_exception(accepting->error);
        } catch (const std::exception& e) {
          message = std::string("constraint: ") + e.what();
        } catch (...) {
        }
        log_error(message);
        for (const auto& o : outcomes) {
          auto it = live_.find(o.id);
          if (it != live_.end() && it->second.constrained) {
            finish(o.id, FinishReason::kError, message);
          }
        }
      }
      accept_ns_ += accepting->result.compute_ns;
      std::vector<NewToken> after;  // forced tokens, and the ends of completed outputs
      for (auto& v : accepting->result.verdicts) {
        auto it = live_.find(v.id);
        if (it == live_.end()) continue;  // ended by a stop string, cancelled, failed
        if (v.verdict == grammar::TokenConstraint::Verdict::kRejected && !v.error.empty()) {
          // The grammar refused the output itself (too ambiguous to follow).
          finish(v.id, FinishReason::kError, "response_format: " + v.error);
          continue;
        }
        if (v.verdict == grammar::TokenConstraint::Verdict::kRejected) {
          // The mask should have made this impossible: a bug, reported as such.
          const auto o = std::find_if(outcomes.begin(), outcomes.end(),
                                      [&](const SampleOutcome& x) { return x.id == v.id; });
          finish(v.id, FinishReason::kError,
                 "internal: token " +
                     std::to_string(o != outcomes.end() && o->token ? o->token->id : -1) +
                     " was sampled but the response format does not allow it");
          continue;
        }
        const bool complete = v.verdict == grammar::TokenConstraint::Verdict::kComplete;
        auto ending = std::find_if(finishing.begin(), finishing.end(),
                                   [&](const auto& f) { return f.first == v.id; });
        if (ending != finishing.end()) {
          // The sampled token ended the output already (an eos, the budget): nothing was
          // forced after it, and a complete grammar makes the reason `stop`.
          if (complete) ending->second = FinishReason::kStop;
          continue;
        }
        std::vector<std::int32_t> forced = std::move(v.forced);
        if (!forced.empty()) {
          // Bounded by the budget already; the scheduler checks again.
          const int appended = scheduler_.append_tokens(v.id, forced);
          forced.resize(static_cast<std::size_t>(appended));
          sampler_.accept(v.id, forced);
          metrics_.jump_forward_tokens += static_cast<std::uint64_t>(appended);
          metrics_.generated_tokens += forced.size();
        }
        const sched::Sequence* seq = scheduler_.find(v.id);
        const bool length = seq != nullptr && seq->generated() >= it->second.params.max_tokens;
        // Forced tokens stream as ordinary deltas after the sampled one; they were not drawn,
        // so their logprob is 0 (probability 1 under the grammar) and they carry no top list.
        for (std::int32_t f : forced) {
          NewToken ft;
          ft.id = v.id;
          ft.token.id = f;
          after.push_back(std::move(ft));
        }
        if (complete || length) {
          if (forced.empty()) {
            NewToken end;  // no token: flushes the text held back, and ends the output
            end.id = v.id;
            end.token.id = -1;
            after.push_back(std::move(end));
          }
          after.back().last = true;
          finishing.emplace_back(v.id, complete ? FinishReason::kStop : FinishReason::kLength);
        }
      }
      co_await detokenize(std::move(after));
    }
    for (const auto& [id, reason] : finishing)
      finish(id, reason);
    // Sequence groups: pages freed here may let a waiting request in, into an idle group.
    if (group >= 0 && scheduler_.waiting() > 0) wake_.cancel();
  }
  if (group >= 0) {
    set_group_state(group, GroupState::kIdle);
    if (--loops_ > 0) co_return;  // the last group's loop ends the engine's requests
  }
  while (!live_.empty())
    finish(live_.begin()->first, FinishReason::kShutdown);
  stopped_ = true;
  if (step_trace_) step_trace_->flush();
  for (auto& waiter : shutdown_waiters_) {
    complete(std::move(waiter), strand().get_inner_executor(), std::exception_ptr());
  }
  shutdown_waiters_.clear();
}

}  // namespace weft::actors
