#pragma once
// Reads a model's chat template as transformers does: `chat_template.jinja` in the model
// folder when there is one, else the "chat_template" field of tokenizer_config.json (a string,
// or a list of {"name", "template"} from which "default" is used, or "tool_use" when tools
// are given). The special tokens (bos_token, eos_token, ...) become template variables; a
// token may be a string or an object with "content"; special_tokens_map.json overrides them.

#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/text/chat_template.hpp"
#include "runtime/text/jinja_value.hpp"
#include "weft/error.hpp"

namespace weft {

struct ChatTemplateFile {
  // Where the templates came from: chat_template.jinja or tokenizer_config.json.
  std::filesystem::path path;
  // Named templates; a single template is named "default".
  std::vector<std::pair<std::string, std::string>> templates;
  jinja::Dict special_tokens;
};

// `path` is a model folder or a tokenizer_config.json. A model without a chat template is a
// kNotFound error naming the file that was searched.
Result<ChatTemplateFile> read_chat_template_file(const std::filesystem::path& path);

// Reads and parses the template transformers would use: "tool_use" when `with_tools` and the
// file names one, else "default".
Result<ChatTemplate> load_chat_template(const std::filesystem::path& path, bool with_tools);

// JSON text as a template value: objects become dicts in document order, numbers ints or
// floats as Python's json module reads them.
Result<jinja::Value> parse_json_value(std::string_view json, std::string_view source_name);
Result<jinja::Value> read_json_value_file(const std::filesystem::path& path);

}  // namespace weft
