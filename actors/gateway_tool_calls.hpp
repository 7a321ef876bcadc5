#pragma once
// Tool calls out of generated text (docs/http-api.md#tools): the text of a request with
// tools, fed as it arrives, becomes content and tool calls (a call's start with its id and
// name, then its arguments in fragments), which the gateway turns into OpenAI's
// message.tool_calls, streaming delta.tool_calls, or WebSocket tool_call frames. The grammar
// (runtime/grammar/tool_call_grammar.hpp) makes the calls well formed; the parser still checks
// and, when the text is not a call after all, hands it back as content.

#include <boost/json/fwd.hpp>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/grammar/tool_call_grammar.hpp"
#include "weft/engine.hpp"
#include "weft/error.hpp"

namespace weft::gateway {

struct ToolCallPiece {
  enum class Kind { kContent, kCallStart, kArguments };
  Kind kind = Kind::kContent;
  int index = 0;     // kCallStart, kArguments: which call of the choice
  std::string text;  // kContent: text; kArguments: a fragment of the arguments' JSON
  std::string id;    // kCallStart: "call_..."
  std::string name;  // kCallStart
};

class ToolCallParser {
 public:
  ToolCallParser(grammar::ToolCallFormat format, std::function<std::string()> new_id);

  // The pieces `text` completes. Text that might still turn out to open a call, and
  // whitespace that might precede one, is held back until the next feed or finish().
  std::vector<ToolCallPiece> feed(std::string_view text);
  // What is still held back, at the end of the output.
  std::vector<ToolCallPiece> finish();
  int calls() const { return calls_; }

 private:
  enum class State { kStart, kText, kHeader, kArgs, kAfterArgs, kBetween, kDone };
  enum class Match { kMore, kFail, kDone };
  void run(std::vector<ToolCallPiece>& out, bool at_end);
  void content(std::vector<ToolCallPiece>& out, std::string text, bool keep_trailing_space);
  Match header(std::size_t& used, std::string& name) const;
  Match after_args(std::size_t& used) const;

  grammar::ToolCallFormat format_;
  std::function<std::string()> new_id_;
  State state_ = State::kStart;
  std::string pending_;     // received, not yet turned into pieces
  std::string held_space_;  // content whitespace that may precede a call
  std::string call_raw_;    // the current call's text so far, given back if it is no call
  int calls_ = 0;
  int depth_ = 0;  // inside the arguments: JSON nesting
  bool in_string_ = false;
  bool escaped_ = false;
  bool args_started_ = false;
};

// A whole output at once: the content (empty when there is none) and the calls.
struct ParsedToolCalls {
  std::string content;
  struct Call {
    std::string id, name, arguments;
  };
  std::vector<Call> calls;
};
void collect(const std::vector<ToolCallPiece>& pieces, ParsedToolCalls& into);

}  // namespace weft::gateway

namespace weft::gateway {

// The request side (gateway_tools_request.cpp): `tools`, `tool_choice`, `parallel_tool_calls`
// and an assistant message's `tool_calls`, checked with errors that name the field
// ("tools[1].function.name: ...").
struct ToolsRequest {
  bool has_tools = false;
  std::string tools_json;  // the checked `tools`, for the chat template
  std::vector<grammar::ToolFunction> functions;
  std::string choice;  // none, auto, required, or empty when not given
  std::string named;   // tool_choice {"type": "function", "function": {"name"}}
  bool parallel = true;
};
Result<void> parse_tools(const boost::json::value& v, ToolsRequest& out);
Result<void> parse_tool_choice(const boost::json::value& v, ToolsRequest& out);
// The grammar spec the request asks for (none when no tool may be called), its parameter
// schemas compiled once here so that a bad one is an error naming it.
Result<std::optional<grammar::ToolCallSpec>> tool_call_spec(const ToolsRequest& request,
                                                            grammar::ToolCallFormat format,
                                                            bool flexible_whitespace);
Result<void> parse_message_tool_calls(const boost::json::value& v, const std::string& at,
                                      std::vector<ChatToolCall>& out);

}  // namespace weft::gateway
