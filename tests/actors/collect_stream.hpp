#pragma once
// What the engine tests read from a one-sample request's stream: every delta gathered, then
// the final event's reason, usage and error.

#include <boost/asio/use_future.hpp>
#include <memory>
#include <string>
#include <vector>

#include "weft/engine.hpp"

namespace weft::test_support {

struct Collected {
  std::string text;
  std::vector<std::int32_t> ids;
  std::vector<TokenLogprobs> logprobs;
  FinishReason reason = FinishReason::kError;
  Usage usage;
  std::string error;
  int deltas = 0;
};

inline Collected collect(const std::shared_ptr<RequestStream>& stream) {
  Collected c;
  for (;;) {
    Event e = stream->next(boost::asio::use_future).get();
    if (e.kind == Event::Kind::kFinal) {
      c.reason = e.finish_reason;
      c.usage = e.usage;
      c.error = e.error;
      return c;
    }
    ++c.deltas;
    c.text += e.text;
    c.ids.insert(c.ids.end(), e.token_ids.begin(), e.token_ids.end());
    c.logprobs.insert(c.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
  }
}

}  // namespace weft::test_support
