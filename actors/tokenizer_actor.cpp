#include "actors/tokenizer_actor.hpp"

#include <string>

#include "loaders/chat_template_file.hpp"

namespace weft::actors {

jinja::Value chat_messages_value(const std::vector<ChatMessage>& messages) {
  jinja::List list;
  for (const ChatMessage& m : messages) {
    jinja::Dict d;
    d.set("role", m.role);
    d.set("content", m.content);
    if (!m.name.empty()) d.set("name", m.name);
    if (!m.tool_call_id.empty()) d.set("tool_call_id", m.tool_call_id);
    if (!m.tool_calls.empty()) {
      // As transformers' templates expect: arguments as a dict when they are a JSON object
      // (templates apply tojson to them), else the text as it came.
      jinja::List calls;
      for (const ChatToolCall& c : m.tool_calls) {
        jinja::Value arguments(c.arguments);
        if (auto parsed = parse_json_value(c.arguments, "tool_calls.arguments");
            parsed && parsed->is_dict()) {
          arguments = std::move(parsed.value());
        }
        jinja::Dict function;
        function.set("name", c.name);
        function.set("arguments", std::move(arguments));
        jinja::Dict call;
        if (!c.id.empty()) call.set("id", c.id);
        call.set("type", "function");
        call.set("function", std::move(function));
        calls.emplace_back(std::move(call));
      }
      d.set("tool_calls", std::move(calls));
    }
    list.emplace_back(std::move(d));
  }
  return jinja::Value(std::move(list));
}

TokenizerActor::TokenizerActor(const asio::any_io_executor& executor,
                               std::shared_ptr<const text::Tokenizer> tokenizer,
                               std::optional<ChatTemplate> chat_template,
                               std::string chat_template_error, int vocab_size)
    : Actor(executor),
      tokenizer_(std::move(tokenizer)),
      chat_template_(std::move(chat_template)),
      chat_template_error_(std::move(chat_template_error)),
      vocab_size_(vocab_size) {}

std::vector<std::int32_t> TokenizerActor::encode_request(const GenerateRequest& r) const {
  const int given = !r.prompt.empty() + !r.messages.empty() + !r.prompt_ids.empty();
  if (given != 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "prompt: give exactly one of prompt, messages or prompt_ids (got " +
                    std::to_string(given) + ")");
  }
  if (!r.prompt_ids.empty()) {
    for (std::int32_t id : r.prompt_ids) {
      if (id < 0 || id >= vocab_size_) {
        throw Error(ErrorCode::kInvalidArgument, "prompt_ids: " + std::to_string(id) +
                                                     " is outside the vocabulary [0, " +
                                                     std::to_string(vocab_size_) + ")");
      }
    }
    return r.prompt_ids;
  }
  if (!tokenizer_) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string(r.messages.empty() ? "prompt" : "messages") +
                    ": the model folder has no tokenizer.json; give prompt_ids");
  }
  std::string text = r.prompt;
  bool add_special = r.add_special_tokens;
  if (!r.messages.empty()) {
    if (!chat_template_) {
      throw Error(ErrorCode::kUnsupported, "messages: " + chat_template_error_);
    }
    jinja::Value list = chat_messages_value(r.messages);
    ChatTemplateOptions options;
    options.add_generation_prompt = true;
    if (!r.tools.empty()) {
      auto tools = parse_json_value(r.tools, "tools");
      if (!tools) throw Error(ErrorCode::kInvalidArgument, tools.error().what());
      options.tools = std::move(tools.value());
    }
    auto rendered = chat_template_->render(list, options);
    if (!rendered) throw rendered.error();
    text = std::move(rendered.value());
    add_special = false;  // the template writes its own special tokens, as transformers does
  }
  auto ids = tokenizer_->encode(text, add_special);
  if (!ids) throw ids.error();
  return {ids->begin(), ids->end()};
}

}  // namespace weft::actors
