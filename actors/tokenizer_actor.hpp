#pragma once
// The tokenizer: turns a request's prompt (text, chat messages or ids) into token ids, off the
// scheduler's strand (LightLLM's asynchronous tokenization, as an actor).

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "runtime/text/chat_template.hpp"
#include "runtime/text/tokenizer.hpp"
#include "weft/actor.hpp"
#include "weft/engine.hpp"

namespace weft::actors {

// A conversation as the chat template receives it, as transformers passes it: a list of dicts
// with role and content (OpenAI's null content as "", as vLLM passes it: Qwen3's template
// fails on None), name, tool_call_id, and tool_calls as
// [{id, type: "function", function: {name, arguments}}] with arguments a dict when they are a
// JSON object (templates apply tojson to them, as vLLM arranges too).
jinja::Value chat_messages_value(const std::vector<ChatMessage>& messages);

class TokenizerActor : public Actor {
 public:
  // `chat_template` may be empty: requests with messages are then refused with the reason.
  // `tokenizer` may be null (an encoder-decoder folder without one): only prompt_ids work.
  TokenizerActor(const asio::any_io_executor& executor,
                 std::shared_ptr<const text::Tokenizer> tokenizer,
                 std::optional<ChatTemplate> chat_template, std::string chat_template_error,
                 int vocab_size);

  template <class Token>
  auto encode(GenerateRequest request, Token&& token) {
    return ask([this, request = std::move(request)] { return encode_request(request); },
               std::forward<Token>(token));
  }

 private:
  std::vector<std::int32_t> encode_request(const GenerateRequest& request) const;

  std::shared_ptr<const text::Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_template_;
  std::string chat_template_error_;
  int vocab_size_;
};

}  // namespace weft::actors
