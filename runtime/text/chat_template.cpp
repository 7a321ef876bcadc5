#include "runtime/text/chat_template.hpp"

namespace weft {

Result<ChatTemplate> ChatTemplate::parse(std::string_view source, std::string source_name,
                                         jinja::Dict special_tokens) {
  auto parsed = jinja::Template::parse(source, std::move(source_name));
  if (!parsed) return parsed.error();
  return ChatTemplate(std::move(parsed).value(), std::move(special_tokens));
}

Result<std::string> ChatTemplate::render(const jinja::Value& messages,
                                         const ChatTemplateOptions& options) const {
  if (!messages.is_list()) {
    return Error(ErrorCode::kInvalidArgument,
                 source_name() + ": messages must be a list of message objects, not " +
                     messages.type_name());
  }
  // The variables in the order transformers builds them: messages, tools, documents,
  // add_generation_prompt, then the special tokens, then the caller's extra kwargs.
  jinja::Dict variables;
  variables.set("messages", messages);
  variables.set("tools", options.tools);
  variables.set("documents", options.documents);
  variables.set("add_generation_prompt", jinja::Value(options.add_generation_prompt));
  for (const auto& [k, v] : special_tokens_.items)
    variables.set(k, v);
  for (const auto& [k, v] : options.extra.items)
    variables.set(k, v);
  return template_.render(variables, options.limits);
}

}  // namespace weft
