#include <boost/asio/system_executor.hpp>

#include "actors/completion.hpp"
#include "weft/engine.hpp"

namespace weft {

std::string_view to_string(FinishReason reason) noexcept {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kShutdown:
      return "shutdown";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

void RequestStream::push(Event event) {
  std::optional<boost::asio::any_completion_handler<Signature>> handler;
  {
    std::lock_guard lock(mutex_);
    if (event.index >= 0 && static_cast<std::size_t>(event.index) < ended_.size()) {
      char& ended = ended_[static_cast<std::size_t>(event.index)];
      if (ended != 0) return;  // nothing after a sample's final event
      if (event.kind == Event::Kind::kFinal) ended = 1;
    }
    if (waiting_) {
      handler = std::move(waiting_);
      waiting_.reset();
      finals_taken_ += event.kind == Event::Kind::kFinal;
    } else {
      events_.push_back(std::move(event));
      return;
    }
  }
  actors::complete(std::move(*handler), boost::asio::system_executor(), std::exception_ptr(),
                   std::move(event));
}

void RequestStream::next_impl(boost::asio::any_completion_handler<Signature> handler) {
  std::unique_lock lock(mutex_);
  if (!events_.empty()) {
    Event event = std::move(events_.front());
    events_.pop_front();
    finals_taken_ += event.kind == Event::Kind::kFinal;
    lock.unlock();
    actors::complete(std::move(handler), boost::asio::system_executor(), std::exception_ptr(),
                     std::move(event));
    return;
  }
  if (finals_taken_ >= samples_) {
    lock.unlock();
    actors::complete(std::move(handler), boost::asio::system_executor(),
                     std::make_exception_ptr(Error(
                         ErrorCode::kOutOfRange,
                         "request " + std::to_string(id_) + ": the final event was already taken")),
                     Event{});
    return;
  }
  if (waiting_) {
    lock.unlock();
    actors::complete(std::move(handler), boost::asio::system_executor(),
                     std::make_exception_ptr(Error(ErrorCode::kInvalidArgument,
                                                   "request " + std::to_string(id_) +
                                                       ": next() called while one is pending")),
                     Event{});
    return;
  }
  waiting_ = std::move(handler);
}

}  // namespace weft
