#include "actors/detokenizer_actor.hpp"

namespace weft::actors {

DetokenizerActor::DetokenizerActor(const asio::any_io_executor& executor,
                                   std::shared_ptr<const text::Tokenizer> tokenizer)
    : Actor(executor), tokenizer_(std::move(tokenizer)) {}

void DetokenizerActor::add(std::uint64_t id, std::shared_ptr<RequestStream> stream,
                           std::vector<std::string> stop_strings, int sample_index) {
  post([this, id, stream = std::move(stream), stops = std::move(stop_strings),
        sample_index]() mutable {
    states_.insert_or_assign(
        id, State{std::move(stream), sample_index,
                  text::IncrementalDetokenizer(tokenizer_, /*skip_special_tokens=*/true),
                  text::StopStringMatcher(std::move(stops))});
  });
}

void DetokenizerActor::remove(std::uint64_t id) {
  post([this, id] { states_.erase(id); });
}

std::vector<std::uint64_t> DetokenizerActor::process_tokens(const std::vector<NewToken>& tokens) {
  std::vector<std::uint64_t> stopped;
  for (const NewToken& t : tokens) {
    auto it = states_.find(t.id);
    if (it == states_.end()) continue;  // cancelled meanwhile
    State& s = it->second;
    if (s.stops.stopped()) continue;
    if (!tokenizer_) {  // ids only
      if (t.token.id < 0) continue;
      Event event;
      event.kind = Event::Kind::kDelta;
      event.index = s.index;
      event.token_ids.push_back(t.token.id);
      event.logprobs.push_back(t.token);
      s.stream->push(std::move(event));
      continue;
    }
    if (t.token.id < 0) {
      // No token: the output ends here (NewToken::last); what was held back goes out.
      if (!t.last) continue;
      auto rest = s.detokenizer.finish();
      auto shown = s.stops.push(rest ? rest.value() : std::string());
      std::string out = std::move(shown.text);
      if (!shown.stopped) out += s.stops.finish();
      if (shown.stopped) stopped.push_back(t.id);
      if (out.empty()) continue;
      Event event;
      event.kind = Event::Kind::kDelta;
      event.index = s.index;
      event.text = std::move(out);
      s.stream->push(std::move(event));
      continue;
    }
    auto delta = s.detokenizer.push(static_cast<std::uint32_t>(t.token.id));
    std::string text = delta ? std::move(delta.value()) : std::string();
    if (t.last) {
      auto rest = s.detokenizer.finish();
      if (rest) text += rest.value();
    }
    auto shown = s.stops.push(text);
    std::string out = std::move(shown.text);
    if (t.last && !shown.stopped) out += s.stops.finish();
    Event event;
    event.kind = Event::Kind::kDelta;
    event.index = s.index;
    event.text = std::move(out);
    event.token_ids.push_back(t.token.id);
    event.logprobs.push_back(t.token);
    s.stream->push(std::move(event));
    if (shown.stopped) stopped.push_back(t.id);
  }
  return stopped;
}

}  // namespace weft::actors
