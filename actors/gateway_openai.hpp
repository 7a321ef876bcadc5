#pragma once
// The OpenAI-compatible request and response JSON of the gateway (docs/http-api.md): a request
// body becomes a GenerateRequest with every parameter checked, and engine events become
// OpenAI's completion objects and streaming chunks. Plain functions without I/O, shared by
// the HTTP and WebSocket sessions; Beast stays out of this header.

#include <boost/json/fwd.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/gateway_tool_calls.hpp"
#include "weft/engine.hpp"
#include "weft/error.hpp"

namespace weft::gateway {

// Which request shape a body has: the parameters accepted differ a little.
enum class Api { kCompletions, kChat, kWebSocket };

// What the server knows about its one model.
struct ServedModel {
  std::string name;  // the `model` clients send; the model folder's name
  int vocab_size = 0;
  int context_length = 0;
  // Text of one token id, for logprobs; empty for an unknown id.
  std::function<std::string(std::int32_t)> token_text;
  // How the model writes tool calls (from its chat template, or --tool-call-format).
  grammar::ToolCallFormat tool_call_format = grammar::ToolCallFormat::kHermes;
};

struct ParsedRequest {
  GenerateRequest generate;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;       // report logprobs (completions: `logprobs` given)
  // Set when the request may call tools: the output is parsed for calls in this format.
  std::optional<grammar::ToolCallFormat> tool_calls;
};

// A fresh tool call id, "call_" and 24 random letters and digits.
std::string new_tool_call_id();

// Parses and checks `body` (one JSON object). Errors are kInvalidArgument with a message that
// starts with the parameter's name and a colon ("top_p: 1.5 is outside (0, 1]"), or kNotFound
// for a model this server does not serve, or kParse for a body that is not a JSON object.
Result<ParsedRequest> parse_request(std::string_view body, Api api, const ServedModel& model);
Result<ParsedRequest> parse_request(const boost::json::object& object, Api api,
                                    const ServedModel& model);

// The parameter an error names (the text before the first ": " when it is a parameter path),
// or empty.
std::string error_param(const Error& error);

// OpenAI's error object: {"error":{"message","type","param","code"}}.
std::string error_json(std::string_view message, std::string_view type, std::string_view param,
                       std::string_view code);

// What a finish reason is called in OpenAI's finish_reason field.
std::string_view finish_reason_name(FinishReason reason);

// Accumulates a non-streaming response from the engine's events.
class CompletionBuilder {
 public:
  CompletionBuilder(Api api, const ServedModel& model, std::string id, std::int64_t created,
                    int samples, bool logprobs,
                    std::optional<grammar::ToolCallFormat> tool_calls = std::nullopt);
  void add(const Event& event);
  std::string json() const;

 private:
  struct Choice {
    std::string text;
    std::vector<TokenLogprobs> logprobs;
    FinishReason finish_reason = FinishReason::kStop;
  };
  std::optional<grammar::ToolCallFormat> tool_calls_;
  Api api_;
  const ServedModel& model_;
  std::string id_;
  std::int64_t created_;
  bool logprobs_;
  std::vector<Choice> choices_;
  Usage usage_;
};

// Writes the `data: {...}\n\n` lines of a streaming response, OpenAI's chunk format.
class ChunkWriter {
 public:
  ChunkWriter(Api api, const ServedModel& model, std::string id, std::int64_t created,
              bool include_usage, bool logprobs,
              std::optional<grammar::ToolCallFormat> tool_calls = std::nullopt);
  // The SSE lines an event gives (chat's first delta of a choice also carries the role).
  std::string on_event(const Event& event);
  // The usage chunk (when asked for) and `data: [DONE]`.
  std::string finish() const;

 private:
  std::string chunk(const boost::json::value& choice, bool with_usage) const;
  Api api_;
  const ServedModel& model_;
  std::string id_;
  std::int64_t created_;
  bool include_usage_;
  bool logprobs_;
  std::vector<bool> role_sent_;
  Usage usage_;
  // With tools: one parser per choice, turning its text into content and tool_calls deltas.
  std::optional<grammar::ToolCallFormat> tool_calls_;
  std::vector<std::optional<ToolCallParser>> parsers_;
  std::string tool_deltas(std::size_t index, const std::vector<ToolCallPiece>& pieces);
};

// The JSON of tool calls in a message: [{id, type: "function", function: {name, arguments}}].
boost::json::value tool_calls_json(const ParsedToolCalls& parsed);
// A choice's finish_reason: "tool_calls" when it made calls and stopped on its own.
std::string_view finish_reason_name(FinishReason reason, int tool_calls);

// Logprobs in OpenAI's shapes: completions' {tokens, token_logprobs, top_logprobs, text_offset}
// and chat's {content: [{token, logprob, bytes, top_logprobs}]}. `text_offset` starts at
// `offset` and advances by each token's text.
boost::json::value completion_logprobs_json(const std::vector<TokenLogprobs>& logprobs,
                                            const ServedModel& model, std::size_t offset);
boost::json::value chat_logprobs_json(const std::vector<TokenLogprobs>& logprobs,
                                      const ServedModel& model);
boost::json::value usage_json(const Usage& usage);

}  // namespace weft::gateway
