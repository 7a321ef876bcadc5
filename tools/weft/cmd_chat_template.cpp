// `weft chat-template`: render a conversation with a model's chat template, as transformers'
// apply_chat_template(messages, tokenize=False, ...) would, and print the prompt exactly
// (no newline is added).

#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>

#include "loaders/chat_template_file.hpp"
#include "runtime/text/chat_template.hpp"
#include "tools/weft/commands.hpp"

namespace weft::cli {
namespace {

struct ChatTemplateCommandOptions {
  std::string model;
  std::string messages_file;
  bool add_generation_prompt = false;
};

Result<jinja::Value> read_messages(const std::string& file) {
  if (file == "-") {
    std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    return parse_json_value(text, "<stdin>");
  }
  return read_json_value_file(file);
}

int run_chat_template(const ChatTemplateCommandOptions& opts) {
  auto fail = [](const std::string& message) {
    std::cerr << "weft chat-template: " << message << '\n';
    return 1;
  };
  auto input = read_messages(opts.messages_file);
  if (!input) return fail(input.error().what());

  // Either a list of messages, or {"messages": [...], "tools": [...], "add_generation_prompt":
  // bool, <other template variables>}.
  ChatTemplateOptions options;
  options.add_generation_prompt = opts.add_generation_prompt;
  jinja::Value messages = input.value();
  if (messages.is_dict()) {
    const jinja::Dict& doc = input->as_dict();
    const jinja::Value* list = doc.find("messages");
    if (list == nullptr) {
      return fail(opts.messages_file + ": the object has no \"messages\" list");
    }
    messages = *list;
    for (const auto& [key, value] : doc.items) {
      if (key == "messages") continue;
      if (key == "tools") {
        options.tools = value;
      } else if (key == "documents") {
        options.documents = value;
      } else if (key == "add_generation_prompt") {
        options.add_generation_prompt = options.add_generation_prompt || value.truthy();
      } else {
        options.extra.set(key, value);
      }
    }
  }
  if (!messages.is_list()) {
    return fail(opts.messages_file +
                ": expected a JSON list of messages, or an object with a "
                "\"messages\" list");
  }
  auto tmpl = load_chat_template(opts.model, !options.tools.is_none());
  if (!tmpl) return fail(tmpl.error().what());
  auto prompt = tmpl->render(messages, options);
  if (!prompt) return fail(prompt.error().what());
  std::cout << prompt.value() << std::flush;
  return 0;
}

}  // namespace

void add_chat_template_command(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<ChatTemplateCommandOptions>();
  auto* cmd = app.add_subcommand(
      "chat-template",
      "Render a conversation with a model's chat template (tokenizer_config.json's "
      "\"chat_template\" or chat_template.jinja) and print the prompt, as transformers' "
      "apply_chat_template(tokenize=False) does.");
  cmd->add_option("--model", opts->model, "Model folder, its tokenizer_config.json, or a GGUF file")
      ->required();
  cmd->add_option("--messages", opts->messages_file,
                  "JSON file ('-' for stdin): a list of {\"role\", \"content\", ...} messages, "
                  "or an object with \"messages\" and optionally \"tools\" and other template "
                  "variables such as \"enable_thinking\"")
      ->required();
  cmd->add_flag("--add-generation-prompt", opts->add_generation_prompt,
                "Append the header that opens the assistant's turn");
  cmd->callback([opts, &exit_code] { exit_code = run_chat_template(*opts); });
}

}  // namespace weft::cli
