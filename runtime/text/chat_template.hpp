#pragma once
// A model's chat template: the Jinja `chat_template` of tokenizer_config.json, rendered as
// transformers' `apply_chat_template(messages, tokenize=False, ...)` renders it (Jinja with
// trim_blocks and lstrip_blocks; tojson as json.dumps(ensure_ascii=False); globals
// raise_exception and strftime_now; the tokenizer's special tokens as variables).
// loaders/chat_template_file.hpp reads the template from a model folder.

#include <string>
#include <string_view>

#include "runtime/text/jinja_eval.hpp"
#include "runtime/text/jinja_value.hpp"
#include "weft/error.hpp"

namespace weft {

struct ChatTemplateOptions {
  // Append the header that opens the assistant's turn.
  bool add_generation_prompt = false;
  // Tool schemas (a list of JSON-like dicts), or none; templates test `if tools`.
  jinja::Value tools = jinja::Value::none();
  jinja::Value documents = jinja::Value::none();
  // Further template variables, e.g. enable_thinking; they override special tokens.
  jinja::Dict extra;
  // The work and output one render may take (docs/chat-templates.md, "Limits").
  jinja::RenderLimits limits;
};

class ChatTemplate {
 public:
  // `special_tokens` are the variables transformers passes from the tokenizer's special
  // tokens map (bos_token, eos_token, ...). `source_name` names the template in errors.
  static Result<ChatTemplate> parse(std::string_view source, std::string source_name,
                                    jinja::Dict special_tokens);

  // Renders a conversation: `messages` is a list of dicts with "role" and "content" (and
  // whatever else the template reads, e.g. tool_calls, reasoning_content).
  Result<std::string> render(const jinja::Value& messages,
                             const ChatTemplateOptions& options) const;

  const std::string& source_name() const { return template_.source_name(); }

 private:
  ChatTemplate(jinja::Template t, jinja::Dict special_tokens)
      : template_(std::move(t)), special_tokens_(std::move(special_tokens)) {}

  jinja::Template template_;
  jinja::Dict special_tokens_;
};

}  // namespace weft
