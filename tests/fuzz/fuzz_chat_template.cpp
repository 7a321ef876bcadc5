// Fuzzes the chat template engine (runtime/text/jinja_*.cpp, chat_template.cpp): the input is
// a template; one that parses is rendered with a fixed conversation, tools and special tokens,
// as the tokenizer actor renders a chat request.
#include <cstddef>
#include <cstdint>
#include <map>

#include "loaders/chat_template_file.hpp"
#include "runtime/text/chat_template.hpp"
#include "tests/fuzz/fuzz_util.hpp"

namespace {

const weft::jinja::Value& value_of(std::string_view json) {
  static std::map<std::string_view, weft::jinja::Value> cache;
  auto it = cache.find(json);
  if (it == cache.end()) {
    auto v = weft::parse_json_value(json, "fuzz fixture");
    it = cache.emplace(json, v ? v.value() : weft::jinja::Value::none()).first;
  }
  return it->second;
}

constexpr std::string_view kMessages = R"([
  {"role": "system", "content": "You are terse."},
  {"role": "user", "content": "Hi <b>there</b>"},
  {"role": "assistant", "content": "", "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "get", "arguments": {"city": "Paris", "n": 2}}}]},
  {"role": "tool", "tool_call_id": "c1", "content": "{\"t\": 21.5}"},
  {"role": "assistant", "content": "It is 21.5", "reasoning_content": "think"},
  {"role": "user", "content": [{"type": "text", "text": "and now?"}]}
])";
constexpr std::string_view kTools = R"([
  {"type": "function", "function": {"name": "get", "description": "weather",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
])";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > (64 << 10)) return -1;
  weft::jinja::Dict special;
  special.set("bos_token", weft::jinja::Value("<s>"));
  special.set("eos_token", weft::jinja::Value("</s>"));
  auto tmpl = weft::ChatTemplate::parse(weft::fuzz::as_text(data, size), "fuzz", special);
  if (!tmpl) return 0;
  weft::ChatTemplateOptions options;
  options.add_generation_prompt = true;
  options.tools = value_of(kTools);
  // A twentieth of the default render limits: the same evaluator and the same limit checks,
  // reached twenty times sooner. Mutations of a template that loops to the limit are the
  // corpus's most common input, and at the defaults each took up to a second under ASan, which
  // kept this target near 200 executions a second. What the defaults allow at worst is
  // measured apart (JinjaEvalTest, docs/reliability.md).
  options.limits.max_loop_iterations /= 20;
  options.limits.max_steps /= 20;
  options.limits.max_output_bytes /= 20;
  auto text = tmpl->render(value_of(kMessages), options);
  (void)text;
  return 0;
}
