// Sequence groups in flight (docs/parallel.md, "Sequence groups"): each group's loop submits
// its step to the executor and collects it in turn.

#include <algorithm>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "actors/scheduler_actor.hpp"

namespace weft::actors {

void SchedulerActor::set_group_state(int group, GroupState state) {
  if (group < 0 || static_cast<std::size_t>(group) >= group_state_.size()) return;
  if (group_state_[static_cast<std::size_t>(group)] == state) return;
  group_state_[static_cast<std::size_t>(group)] = state;
  turn_.cancel();
}

void SchedulerActor::release_device_sampler(int group) {
  if (sampling_group_ != group) return;
  sampling_group_ = -1;
  turn_.cancel();
}

asio::awaitable<StepLogits> SchedulerActor::run_in_flight(model::StepBatch batch, int group) {
  // Another group is collecting, or its logits wait in the device sampler: this step would
  // drop them (an idle group woken by a new request, between that group's collect and its
  // sample).
  while (sampling_group_ >= 0 && sampling_group_ != group) {
    boost::system::error_code ec;
    co_await turn_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  in_flight_.push_back(group);
  metrics_.steps_in_flight_peak =
      std::max(metrics_.steps_in_flight_peak, static_cast<int>(in_flight_.size()));
  set_group_state(group, GroupState::kInFlight);
  std::exception_ptr error;
  int rows = 0;
  try {
    rows = co_await executor_.submit(std::move(batch), asio::use_awaitable);
  } catch (...) {
    error = std::current_exception();
  }
  if (error) {
    std::erase(in_flight_, group);
    set_group_state(group, GroupState::kBusy);
    std::rethrow_exception(error);
  }
  // Collected in the order submitted (the pipeline hands the logits back in that order), and
  // only once no other group is about to submit: a group that just sampled its step submits
  // its next one first, so that the first stage runs it while the last stages finish this one.
  const auto my_turn = [&] {
    if (in_flight_.front() != group) return false;
    return std::none_of(group_state_.begin(), group_state_.end(),
                        [](GroupState s) { return s == GroupState::kBusy; });
  };
  while (!my_turn()) {
    boost::system::error_code ec;
    co_await turn_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  in_flight_.pop_front();
  set_group_state(group, GroupState::kBusy);
  // Sampling on the device keeps the logits there (launch()'s contract); the constraint masks
  // and the sampler then see them as one GPU's step. The group holds the device sampler from
  // the collect on (a submit asked for during the collect would reach the executor before
  // the sample) until it has sampled them (loop(): release_device_sampler), or at once where
  // the logits came to the host.
  sampling_group_ = group;
  StepLogits logits = co_await executor_.collect(rows, true, asio::use_awaitable);
  if (!logits.on_device) release_device_sampler(group);
  co_return logits;
}

}  // namespace weft::actors
