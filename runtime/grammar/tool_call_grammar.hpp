#pragma once
// Tool calls as a grammar (OpenAI's `tools` and `tool_choice`, docs/http-api.md#tools): the
// output is a tool call in the model family's own format, its arguments constrained by the
// chosen function's parameter schema, or (tool_choice auto) free text that may end in calls.
//
//   hermes       <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//                (Qwen2.5, Qwen3, Hermes; several calls are separated by "\n")
//   llama3_json  {"name": "f", "parameters": {...}}
//                (Llama 3.1 / 3.2 / 3.3; several calls are separated by "; ")
//
// The request's ResponseFormat of type kToolCalls carries a ToolCallSpec as JSON text
// (tool_call_spec_json), so compiled grammars are cached by it like any other format.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/grammar/grammar.hpp"
#include "runtime/grammar/grammar_compiler.hpp"
#include "weft/error.hpp"

namespace weft::grammar {

enum class ToolCallFormat { kHermes, kLlama3Json };
std::string_view to_string(ToolCallFormat format);
std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name);

// The format a chat template's model was trained on, from the template's text: "<tool_call>"
// is Hermes (Qwen); "<|python_tag|>" or a `"parameters"` JSON instruction is Llama 3. Anything
// else (a template that does not render tools) falls back to Hermes.
ToolCallFormat detect_tool_call_format(std::string_view chat_template_source);

struct ToolFunction {
  int index = 0;           // its place in the request's `tools`, for error messages
  std::string name;        // [A-Za-z0-9_-]{1,64}, checked by the gateway
  std::string parameters;  // a JSON Schema (compact JSON text); empty: any JSON object
  bool strict = false;     // refuse parameter schema keywords that cannot be enforced
};

struct ToolCallSpec {
  ToolCallFormat format = ToolCallFormat::kHermes;
  // true: the output is one or more calls (tool_choice required or a named function);
  // false: free text that does not contain the call marker (hermes) or does not start with
  // '{' (llama3_json), or calls (tool_choice auto); hermes also allows text then calls.
  bool required = true;
  bool parallel = true;  // several calls allowed (parallel_tool_calls)
  bool flexible_whitespace = false;
  std::vector<ToolFunction> functions;  // at least one
};

std::string tool_call_spec_json(const ToolCallSpec& spec);
Result<ToolCallSpec> parse_tool_call_spec(std::string_view json);

// Errors name the function's parameters ("tools[1].function.parameters: JSON Schema at
// '#/properties/x': unsupported keyword 'not'").
Result<Grammar> tool_call_grammar(const ToolCallSpec& spec);
// The same grammar flattened, the form that checked it (for CompiledGrammar::compile).
Result<FlatGrammar> tool_call_flat_grammar(const ToolCallSpec& spec);

// Copies every rule of `source` into `target`, names prefixed, and returns the rule that was
// source's root. Used to put several schemas' grammars side by side in one grammar.
RuleId import_grammar(Grammar& target, const Grammar& source, const std::string& prefix);

}  // namespace weft::grammar
