// The step loop's overlap (docs/engine.md#step-loop): a step's tokens go to the detokenizer
// and the loop plans and launches the next step before the reply, so the text, the stop-string
// checks and the final events of the sequences that ended are made while the device runs.
//
// What keeps the output that of the serial loop:
// - A sequence the step ended by a stop token or its length is taken out of the scheduler
//   before the next plan (retire: its pages back, as the serial loop frees them), but its final
//   event waits for the reply, so it still follows the sequence's last text.
// - A sequence a stop string ended (known only from the reply) may be in the next step,
//   already launched: it ends as the serial loop ended it (reason, usage as of the step before)
//   once the device is done with the step in flight (end_in_flight): its pages go back and its
//   final event goes out before that step's tokens are read, so its token there is dropped
//   (never streamed or counted; the scheduler no longer has the sequence to append it to).
#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>

#include "actors/scheduler_actor.hpp"
#include "weft/log.hpp"

namespace weft::actors {

namespace {

std::uint64_t since(std::chrono::steady_clock::time_point t) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t)
          .count());
}

}  // namespace

asio::awaitable<void> SchedulerActor::detokenize(std::vector<NewToken> tokens) {
  send_detokenize(std::move(tokens), {});
  co_await settle_detokenize();
}

void SchedulerActor::send_detokenize(
    std::vector<NewToken> tokens, std::vector<std::pair<std::uint64_t, FinishReason>> finishing) {
  auto pending = std::make_shared<PendingDetokenize>();
  pending->finishing = std::move(finishing);
  detokenizing_ = pending;
  if (tokens.empty()) {
    pending->done = true;
    return;
  }
  for (const auto& t : tokens)
    pending->ids.push_back(t.id);
  detokenizer_.process(
      std::move(tokens), [this, pending](std::exception_ptr e, std::vector<std::uint64_t> stopped) {
        asio::post(strand(), [this, pending, e, stopped = std::move(stopped)]() mutable {
          pending->error = e;
          pending->stopped = std::move(stopped);
          pending->done = true;
          masks_ready_.cancel();
        });
      });
}

asio::awaitable<void> SchedulerActor::settle_detokenize() {
  std::shared_ptr<PendingDetokenize> pending = std::move(detokenizing_);
  detokenizing_.reset();
  if (!pending) co_return;
  const auto waiting = std::chrono::steady_clock::now();
  while (!pending->done) {
    boost::system::error_code ec;
    co_await masks_ready_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  phases_.detokenize_wait += since(waiting);
  const auto ending = std::chrono::steady_clock::now();
  // A failure here must not end the loop: every live request would wait forever.
  if (pending->error) {
    std::string message = "detokenizer: failed";
    try {
      std::rethrow_exception(pending->error);
    } catch (const std::exception& e) {
      message = std::string("detokenizer: ") + e.what();
    } catch (...) {
    }
    log_error(message);
    for (std::uint64_t id : pending->ids)
      end_after_step(id, FinishReason::kError, message);
  }
  for (std::uint64_t id : pending->stopped)
    end_after_step(id, FinishReason::kStop);
  for (const auto& [id, reason] : pending->finishing)
    end_after_step(id, reason);
  phases_.finish += since(ending);
}

bool SchedulerActor::runs_in_flight(std::uint64_t id) const {
  return step_in_flight_ && std::binary_search(in_flight_ids_.begin(), in_flight_ids_.end(), id);
}

void SchedulerActor::end_after_step(std::uint64_t id, FinishReason reason, std::string error) {
  auto it = live_.find(id);
  if (it == live_.end() || it->second.ending) return;  // ended already
  if (!runs_in_flight(id)) {
    finish(id, reason, std::move(error));
    return;
  }
  const sched::Sequence* seq = scheduler_.find(id);
  LiveRequest& live = it->second;
  live.ending = reason;
  live.ending_error = std::move(error);
  if (live.final_tokens < 0) {
    live.final_tokens = seq != nullptr ? seq->generated() : 0;
    live.final_cached = seq != nullptr ? seq->cached_tokens : 0;
  }
  ending_in_flight_.push_back(id);
}

void SchedulerActor::end_in_flight() {
  for (std::uint64_t id : ending_in_flight_) {
    if (live_.count(id) == 0) continue;  // cancelled meanwhile
    ++dropped_tokens_;
    finish(id, FinishReason::kStop);  // the reason it ended with (LiveRequest::ending)
  }
  ending_in_flight_.clear();
}

void SchedulerActor::retire(std::uint64_t id) {
  auto it = live_.find(id);
  const sched::Sequence* seq = scheduler_.find(id);
  if (it == live_.end() || seq == nullptr) return;
  it->second.final_tokens = seq->generated();
  it->second.final_cached = seq->cached_tokens;
  scheduler_.remove(id);
}

}  // namespace weft::actors
