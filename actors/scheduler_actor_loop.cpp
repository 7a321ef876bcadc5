// The step loop: plan a step, run it on the executor while the constraint actor computes the
// step's masks, sample, advance the matchers while the detokenizer turns the new tokens into
// text, then end the sequences that stopped. Where it may (docs/engine.md#step-loop), the
// detokenizer's reply and the ends it brings are read only once the next step is launched
// (scheduler_actor_overlap.cpp). Each phase is timed (EngineMetrics::step_phases).
#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "actors/completion.hpp"
#include "actors/scheduler_actor.hpp"
#include "runtime/scheduler/step_trace.hpp"
#include "weft/log.hpp"

namespace weft::actors {

namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t nanoseconds(Clock::duration d) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

}  // namespace

asio::awaitable<void> SchedulerActor::loop(int group) {
  for (;;) {
    if (stopping_) {
      co_await settle_detokenize();  // the last step's text and endings
      break;
    }
    set_group_state(group, GroupState::kBusy);
    // Each phase's time goes to phases_ as the step passes it (lap), the step's whole at its end.
    const auto step_start = Clock::now();
    auto mark = step_start;
    auto lap = [&mark](std::uint64_t& phase) {
      const auto now = Clock::now();
      phase += nanoseconds(now - mark);
      mark = now;
    };
    sched::StepPlan plan = group < 0 ? scheduler_.plan_step() : scheduler_.plan_step(group);
    if (plan.empty()) {
      if (detokenizing_) {
        // Nothing to run until the last step's sequences have ended.
        co_await settle_detokenize();
        continue;
      }
      set_group_state(group, GroupState::kIdle);
      forward_done_.reset();  // idle: the device waits for requests, not for the loop
      boost::system::error_code ec;
      co_await wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    lap(phases_.plan);
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
      batch.sequences.back().compress_heads_vary = s.compress_heads_vary;
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
    lap(phases_.batch);

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
    if (group < 0 && forward_done_) phases_.gap += nanoseconds(launched - *forward_done_);
    forward_done_.reset();
    if (group < 0) {
      // Until the step is sampled, a sequence it runs ends only after it (end_after_step).
      in_flight_ids_.clear();
      for (const auto& s : plan.slices)
        in_flight_ids_.push_back(s.id);
      std::sort(in_flight_ids_.begin(), in_flight_ids_.end());
      step_in_flight_ = true;
    }
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
      lap(phases_.launch);
      phases_.launch_prepare += logits.prepare_ns;
      // The step before's text and endings, made while this step ran (on a GPU, it still runs).
      co_await settle_detokenize();
      mark = Clock::now();
      // On a device sampler the forward pass ends with the sampling reply (below).
      const auto account_forward = [&](std::chrono::steady_clock::time_point done) {
        const auto ns = static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(done - launched).count());
        forward_ns_ += ns;
        if (pending) constrained_forward_ns_ += ns;
        forward_done_ = done;
      };
      if (!logits.on_device) account_forward(logits_ready);
      if (pending) {
        // Both must be ready before sampling: wait for whatever of the masks the forward
        // pass did not hide.
        while (!pending->done) {
          boost::system::error_code ec;
          co_await masks_ready_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        }
        const auto masks_waited = mark;
        lap(phases_.mask_wait);
        mask_wait_ns_ += nanoseconds(mark - masks_waited);
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
          lap(phases_.sampler_prepare);
          model::DeviceSamplingInput input = std::move(prepared.input);
          model::DeviceSamplingOutput sampled =
              co_await executor_.sample(std::move(input), asio::use_awaitable);
          account_forward(std::chrono::steady_clock::now());
          lap(phases_.sample);
          outcomes = co_await sampler_.finish(std::move(prepared), std::move(sampled),
                                              asio::use_awaitable);
          lap(phases_.sampler_finish);
        } else {
          // Greedy draft slices: each node's row drawn greedily on the device beside the plain
          // rows; the trees are walked on the sampler's strand by those picks.
          DeviceSamplePlan prepared =
              co_await sampler_.prepare_step(std::move(rows), std::move(verify), logits.vocab,
                                             std::move(step_masks), asio::use_awaitable);
          lap(phases_.sampler_prepare);
          model::DeviceSamplingInput input = std::move(prepared.input);
          model::DeviceSamplingOutput sampled =
              co_await executor_.sample(std::move(input), asio::use_awaitable);
          account_forward(std::chrono::steady_clock::now());
          lap(phases_.sample);
          StepOutcomes both = co_await sampler_.finish_step(std::move(prepared), std::move(sampled),
                                                            asio::use_awaitable);
          lap(phases_.sampler_finish);
          outcomes = std::move(both.sampled);
          verified = std::move(both.verified);
        }
      } else if (!verify.empty()) {
        StepOutcomes both = co_await sampler_.sample_and_verify(
            std::move(logits), std::move(rows), std::move(verify), asio::use_awaitable);
        outcomes = std::move(both.sampled);
        verified = std::move(both.verified);
        lap(phases_.sample);
      } else {
        outcomes =
            co_await sampler_.sample(std::move(logits), std::move(rows), asio::use_awaitable);
        lap(phases_.sample);
      }
    } catch (...) {
      step_error = std::current_exception();
    }
    // Sampled (or failed): another group may submit its step (run_in_flight).
    if (group >= 0) release_device_sampler(group);
    // A failed forward pass must not leave the masks' callback pointing at a finished step.
    while (pending && !pending->done) {
      boost::system::error_code ec;
      co_await masks_ready_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    // A failed launch left the step before's reply unread; the device is done with this step
    // either way, so the sequences that ended while it ran end now and their pages go back.
    co_await settle_detokenize();
    mark = Clock::now();
    step_in_flight_ = false;
    end_in_flight();
    lap(phases_.finish);
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
      if (it == live_.end()) continue;  // cancelled, or a stop string ended it, while it ran
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
      if (it == live_.end()) continue;  // cancelled, or a stop string ended it, while it ran
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
    lap(phases_.complete);
    // Overlapped (docs/engine.md#step-loop): the next step is planned and launched before the
    // detokenizer's reply. Not for sequence groups (their steps overlap in the pipeline
    // already), constrained rows (the verdicts and forced tokens come first), speculative
    // verification or beam search: those steps stay serial.
    const bool overlap = overlap_ && group < 0 && !accepting && verified.empty() &&
                         beam_groups_.empty() && !stopping_;
    if (overlap && !new_tokens.empty()) {
      for (const auto& f : finishing)
        retire(f.first);
      send_detokenize(std::move(new_tokens), std::move(finishing));
      finishing.clear();
      ++overlapped_steps_;
      lap(phases_.finish);
    } else {
      co_await detokenize(std::move(new_tokens));
      mark = Clock::now();
    }

    if (accepting) {
      while (!accepting->done) {
        boost::system::error_code ec;
        co_await masks_ready_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
      lap(phases_.accept_wait);
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
      mark = Clock::now();
    }
    for (const auto& [id, reason] : finishing)
      finish(id, reason);
    lap(phases_.finish);
    phases_.step += nanoseconds(Clock::now() - step_start);
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
