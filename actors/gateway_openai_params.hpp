#pragma once
// The parameter checks of the OpenAI request parser (parse_request, gateway_openai.cpp): JSON
// values of the expected kind and range, and the parameters with a shape of their own. Every
// error is kInvalidArgument and starts with the parameter's path and a colon.

#include <boost/json/value.hpp>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/sampling/sampling_params.hpp"
#include "weft/engine.hpp"
#include "weft/error.hpp"
#include "weft/response_format.hpp"

namespace weft::gateway::detail {

Error bad(std::string_view param, const std::string& what);

Result<double> number(const boost::json::value& v, std::string_view param);
// An integer in [lo, hi]; a double with an integral value counts (JSON has one number type).
Result<std::int64_t> integer(const boost::json::value& v, std::string_view param, std::int64_t lo,
                             std::int64_t hi);
Result<bool> boolean(const boost::json::value& v, std::string_view param);
Result<std::string> string(const boost::json::value& v, std::string_view param);

inline constexpr std::int64_t kMaxInt = std::numeric_limits<int>::max();

// A null value leaves `out` as it is; else an array of ids below vocab_size, appended.
Result<void> parse_token_ids(const boost::json::value& v, const std::string& param, int vocab_size,
                             std::vector<std::int32_t>& out);
// The `stop` parameter: a string or an array of strings; null is none.
Result<void> parse_stop(const boost::json::value& v, std::vector<std::string>& stop);
Result<void> parse_messages(const boost::json::value& v, std::vector<ChatMessage>& messages);
Result<void> parse_prompt(const boost::json::value& v, GenerateRequest& request, int vocab_size);
// response_format: OpenAI's {"type":"text"}, {"type":"json_object"} and {"type":"json_schema",
// "json_schema":{"name","description","schema","strict"}}, and Weft's {"type":"regex",
// "regex":"..."} and {"type":"grammar","grammar":"..."} (EBNF text). Only the shape is checked
// here; the engine compiles the schema, regex or grammar when the request is submitted and
// its errors (keyword, offset, line and column) come back as `response_format: ...`.
Result<void> parse_response_format(const boost::json::value& v, ResponseFormat& format);
// `speculation` (docs/speculative.md#per-request): {"method": "off" | "prompt-lookup" | "draft",
// "tokens": N}, both optional; a bare string is the method. null: the server's choice.
Result<void> parse_speculation(const boost::json::value& v, sampling::SamplingParams& s);

}  // namespace weft::gateway::detail
