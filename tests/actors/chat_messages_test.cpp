// The tokenizer actor's conversion of a request's ChatMessages (what the gateway builds from
// OpenAI's messages, tool calls and tool results included) into the chat template's input,
// checked by rendering the real Qwen3 and Llama-3 templates and comparing with what
// transformers rendered for the same conversations (tests/fixtures/chat_templates).

#include <gtest/gtest.h>

#include <filesystem>

#include "actors/tokenizer_actor.hpp"
#include "loaders/chat_template_file.hpp"

namespace weft::actors {
namespace {

namespace fs = std::filesystem;
using jinja::Value;

const fs::path kFixtures = fs::path(WEFT_SOURCE_DIR) / "tests/fixtures/chat_templates";
const fs::path kFetched = fs::path(WEFT_BINARY_DIR) / "test-data/tokenizers";

const Value& field(const Value& dict, std::string_view key) {
  static const Value kMissing;
  const Value* v = dict.is_dict() ? dict.as_dict().find(key) : nullptr;
  return v ? *v : kMissing;
}

// The conversation as the gateway hands it over: arguments as JSON text, null content flagged.
std::vector<ChatMessage> messages_of(const Value& conversation) {
  std::vector<ChatMessage> out;
  for (const Value& m : field(conversation, "messages").as_list()) {
    ChatMessage message;
    message.role = field(m, "role").as_string();
    const Value& content = field(m, "content");
    if (content.is_string()) message.content = content.as_string();
    if (field(m, "tool_call_id").is_string()) {
      message.tool_call_id = field(m, "tool_call_id").as_string();
    }
    if (field(m, "tool_calls").is_list()) {
      for (const Value& c : field(m, "tool_calls").as_list()) {
        const Value& f = field(c, "function");
        ChatToolCall call;
        if (field(c, "id").is_string()) call.id = field(c, "id").as_string();
        call.name = field(f, "name").as_string();
        const Value& arguments = field(f, "arguments");
        if (arguments.is_string()) {
          call.arguments = arguments.as_string();
        } else {
          std::string error;
          call.arguments = jinja::to_json(arguments, {}, error).value_or("");
        }
        message.tool_calls.push_back(std::move(call));
      }
    }
    out.push_back(std::move(message));
  }
  return out;
}

// Renders a case of conversations.json; the text, or an error.
Result<std::string> render(const std::string& family, const std::string& name) {
  auto t = load_chat_template(kFetched / family, /*with_tools=*/true);
  if (!t) return t.error();
  auto cases = read_json_value_file(kFixtures / "conversations.json");
  if (!cases) return cases.error();
  for (const Value& c : cases->as_list()) {
    if (field(c, "name").as_string() != name) continue;
    ChatTemplateOptions options;
    options.add_generation_prompt = field(c, "add_generation_prompt").truthy();
    if (!field(c, "tools").is_undefined()) options.tools = field(c, "tools");
    if (field(c, "kwargs").is_dict()) options.extra = field(c, "kwargs").as_dict();
    return t->render(chat_messages_value(messages_of(c)), options);
  }
  return Error(ErrorCode::kNotFound, name + " is not in conversations.json");
}

bool have(const std::string& family) {
  return fs::exists(kFetched / family / "tokenizer_config.json");
}

void check(const std::string& family, const std::string& name) {
  SCOPED_TRACE(family + "/" + name);
  if (!fs::exists(kFetched / family / "tokenizer_config.json")) {
    GTEST_SKIP() << kFetched / family << " is missing: run scripts/fetch-test-data "
                 << WEFT_BINARY_DIR;
  }
  auto t = load_chat_template(kFetched / family, /*with_tools=*/true);
  ASSERT_TRUE(t.ok()) << t.error().what();
  auto cases = read_json_value_file(kFixtures / "conversations.json");
  auto expected = read_json_value_file(kFixtures / "expected.json");
  ASSERT_TRUE(cases.ok() && expected.ok());
  const Value* conversation = nullptr;
  for (const Value& c : cases->as_list())
    if (field(c, "name").as_string() == name) conversation = &c;
  ASSERT_NE(conversation, nullptr);
  const Value& want = field(field(field(*expected, "renders"), family), name);
  ASSERT_TRUE(field(want, "text").is_string()) << "expected.json has no text for this case";

  ChatTemplateOptions options;
  options.add_generation_prompt = field(*conversation, "add_generation_prompt").truthy();
  if (!field(*conversation, "tools").is_undefined()) options.tools = field(*conversation, "tools");
  if (field(*conversation, "kwargs").is_dict()) {
    options.extra = field(*conversation, "kwargs").as_dict();
  }
  auto text = t->render(chat_messages_value(messages_of(*conversation)), options);
  ASSERT_TRUE(text.ok()) << text.error().what();
  EXPECT_EQ(*text, field(want, "text").as_string());
}

TEST(ChatMessages, ToolCallsAndResultsRenderAsTransformersDoes) {
  for (const char* family : {"qwen3", "llama3"}) {
    check(family, "tools_call_and_result");
    check(family, "system_tools_thinking_off");
  }
  // Arguments given as JSON text reach Qwen3's template as a dict, which it prints as the
  // same JSON.
  check("qwen3", "tools_string_arguments_generation");
}

TEST(ChatMessages, NullContentWithToolCallsRenders) {
  if (!have("qwen3")) GTEST_SKIP() << "run scripts/fetch-test-data " << WEFT_BINARY_DIR;
  // transformers fails here on Qwen3 ("argument of type 'NoneType' is not iterable"): null
  // content becomes "", as vLLM makes it.
  auto text = render("qwen3", "tool_calls_with_null_content");
  ASSERT_TRUE(text.ok()) << text.error().what();
  EXPECT_NE(text->find("<tool_call>\n{\"name\": \"ping\", \"arguments\": "
                       "{\"host\": \"example.org\"}}\n</tool_call><|im_end|>"),
            std::string::npos)
      << *text;
}

}  // namespace
}  // namespace weft::actors
