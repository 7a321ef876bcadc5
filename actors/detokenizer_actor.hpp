#pragma once
// The detokenizer: turns each request's new tokens into text deltas (valid UTF-8, stop strings
// withheld) and pushes them to the request's stream, off the scheduler's hot path.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/text/detokenizer.hpp"
#include "runtime/text/stop_strings.hpp"
#include "weft/actor.hpp"
#include "weft/engine.hpp"

namespace weft::actors {

struct NewToken {
  std::uint64_t id = 0;
  TokenLogprobs token;
  bool last = false;  // the sequence ends with this token (length, eos): flush held text
  // token.id < 0 with `last`: the sequence ends after its earlier tokens (a grammar completed
  // by the last one); held text goes out as a delta without tokens, if there is any.
};

class DetokenizerActor : public Actor {
 public:
  // A null `tokenizer` (an encoder-decoder folder without one) streams ids without text.
  DetokenizerActor(const asio::any_io_executor& executor,
                   std::shared_ptr<const text::Tokenizer> tokenizer);

  void add(std::uint64_t id, std::shared_ptr<RequestStream> stream,
           std::vector<std::string> stop_strings, int sample_index);
  void remove(std::uint64_t id);

  // Replies once every message posted before it has run.
  template <class Token>
  auto flush(Token&& token) {
    return ask([] {}, std::forward<Token>(token));
  }

  // Emits the deltas; the reply lists the requests whose output reached a stop string.
  template <class Token>
  auto process(std::vector<NewToken> tokens, Token&& token) {
    return ask([this, tokens = std::move(tokens)] { return process_tokens(tokens); },
               std::forward<Token>(token));
  }

 private:
  struct State {
    std::shared_ptr<RequestStream> stream;
    int index;
    text::IncrementalDetokenizer detokenizer;
    text::StopStringMatcher stops;
  };

  std::vector<std::uint64_t> process_tokens(const std::vector<NewToken>& tokens);

  std::shared_ptr<const text::Tokenizer> tokenizer_;
  std::unordered_map<std::uint64_t, State> states_;
};

}  // namespace weft::actors
