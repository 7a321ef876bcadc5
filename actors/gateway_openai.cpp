#include "actors/gateway_openai.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <limits>

#include "actors/gateway_openai_params.hpp"
#include "actors/gateway_tool_calls.hpp"
#include "runtime/sampling/sampling_params.hpp"

namespace weft::gateway {
namespace json = boost::json;

using detail::bad;
using detail::boolean;
using detail::integer;
using detail::kMaxInt;
using detail::number;
using detail::parse_messages;
using detail::parse_prompt;
using detail::parse_response_format;
using detail::parse_speculation;
using detail::parse_stop;
using detail::parse_token_ids;
using detail::string;

Result<ParsedRequest> parse_request(std::string_view body, Api api, const ServedModel& model) {
  json::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec) return Error(ErrorCode::kParse, "the body is not valid JSON: " + ec.message());
  if (!v.is_object()) return Error(ErrorCode::kParse, "the body is not a JSON object");
  return parse_request(v.get_object(), api, model);
}

Result<ParsedRequest> parse_request(const json::object& object, Api api, const ServedModel& model) {
  ParsedRequest out;
  GenerateRequest& request = out.generate;
  sampling::SamplingParams& s = request.sampling;
  // Chat answers run until the model stops unless bounded; a finite default keeps a request
  // inside the context, where the engine would reject max_tokens beyond it.
  s.max_tokens = api == Api::kCompletions ? 16 : 256;
  bool have_prompt = false;
  const json::value* stream_options = nullptr;
  int top_logprobs = -1;
  bool chat_logprobs = false;
  ToolsRequest tools;
  bool use_beam_search = false;
  int best_of = 0;  // with use_beam_search: the beam width

  for (const auto& [key_view, v] : object) {
    const std::string key(key_view);
    Result<void> r;
    auto num = [&, &v = v](float& field) -> Result<void> {
      if (v.is_null()) return {};
      auto x = number(v, key);
      if (!x) return x.error();
      field = static_cast<float>(*x);
      return {};
    };
    auto intf = [&, &v = v](int& field, std::int64_t lo, std::int64_t hi) -> Result<void> {
      if (v.is_null()) return {};
      auto x = integer(v, key, lo, hi);
      if (!x) return x.error();
      field = static_cast<int>(*x);
      return {};
    };
    if (key == "model") {
      auto name = string(v, key);
      if (!name) return name.error();
      if (*name != model.name) {
        return Error(
            ErrorCode::kNotFound,
            "model: \"" + *name + "\" is not served here; this server has \"" + model.name + "\"");
      }
    } else if (key == "prompt" && api != Api::kChat) {
      r = parse_prompt(v, request, model.vocab_size);
      have_prompt = true;
    } else if (key == "messages" && api != Api::kCompletions) {
      r = parse_messages(v, request.messages);
      have_prompt = true;
    } else if (key == "max_tokens" ||
               (key == "max_completion_tokens" && api != Api::kCompletions)) {
      r = intf(s.max_tokens, 1, kMaxInt);
    } else if (key == "temperature") {
      r = num(s.temperature);
    } else if (key == "top_p") {
      r = num(s.top_p);
    } else if (key == "min_p") {
      r = num(s.min_p);
    } else if (key == "top_k") {
      r = intf(s.top_k, -1, kMaxInt);
    } else if (key == "typical_p") {
      r = num(s.typical_p);
    } else if (key == "tfs_z") {
      r = num(s.tfs_z);
    } else if (key == "mirostat") {
      r = intf(s.mirostat, 0, 2);
    } else if (key == "mirostat_tau") {
      r = num(s.mirostat_tau);
    } else if (key == "mirostat_eta") {
      r = num(s.mirostat_eta);
    } else if (key == "fsd") {
      // Inferflow's strategy names (docs/sampling.md#fsd).
      if (!v.is_null()) {
        auto name = string(v, key);
        if (!name) return name.error();
        if (*name == "off") {
          s.fsd = sampling::Fsd::kOff;
        } else if (*name == "fsd") {
          s.fsd = sampling::Fsd::kFsd;
        } else if (*name == "random_fsd") {
          s.fsd = sampling::Fsd::kRandomized;
        } else {
          return bad(key, "\"" + *name + "\" is not one of off, fsd, random_fsd");
        }
      }
    } else if (key == "fsd_k") {
      r = intf(s.fsd_k, 1, kMaxInt);
    } else if (key == "fsd_alpha") {
      r = num(s.fsd_alpha);
    } else if (key == "fsd_n") {
      r = intf(s.fsd_n, 1, kMaxInt);
    } else if (key == "fsd_beta") {
      r = num(s.fsd_beta);
    } else if (key == "fsd_pool_size") {
      r = intf(s.fsd_pool_size, 1, kMaxInt);
    } else if (key == "fsd_random_steps") {
      r = intf(s.fsd_random_steps, 0, kMaxInt);
    } else if (key == "fsd_random_prob") {
      r = num(s.fsd_random_prob);
    } else if (key == "beam_width") {
      r = intf(s.beam_width, 1, sampling::SamplingParams::kMaxBeamWidth);
    } else if (key == "length_penalty") {
      r = num(s.length_penalty);
    } else if (key == "use_beam_search") {
      // vLLM's former spelling: beam search with best_of (else n) beams.
      if (!v.is_null()) {
        auto b = boolean(v, key);
        if (!b) return b.error();
        use_beam_search = *b;
      }
    } else if (key == "best_of") {
      r = intf(best_of, 1, sampling::SamplingParams::kMaxBeamWidth);
    } else if (key == "repetition_penalty") {
      r = num(s.repetition_penalty);
    } else if (key == "presence_penalty") {
      r = num(s.presence_penalty);
    } else if (key == "frequency_penalty") {
      r = num(s.frequency_penalty);
    } else if (key == "n") {
      r = intf(s.n, 1, sampling::SamplingParams::kMaxN);
    } else if (key == "seed") {
      if (!v.is_null()) {
        auto x = integer(v, key, 0, std::numeric_limits<std::int64_t>::max());
        if (!x) return x.error();
        s.seed = static_cast<std::uint64_t>(*x);
      }
    } else if (key == "stop") {
      r = parse_stop(v, s.stop);
    } else if (key == "stop_token_ids") {
      r = parse_token_ids(v, key, model.vocab_size, s.stop_token_ids);
    } else if (key == "decoder_prefix_ids") {  // encoder-decoder models (docs/seq2seq.md)
      r = parse_token_ids(v, key, model.vocab_size, request.decoder_prefix_ids);
    } else if (key == "speculation") {
      r = parse_speculation(v, s);
    } else if (key == "ignore_eos") {
      auto b = boolean(v, key);
      if (!b) return b.error();
      s.ignore_eos = *b;
    } else if (key == "logit_bias") {
      if (!v.is_null()) {
        if (!v.is_object()) return bad(key, "expected an object of token id to bias");
        for (const auto& [id_text, bias] : v.get_object()) {
          const std::string at = key + "[\"" + std::string(id_text) + "\"]";
          std::int64_t id = -1;
          try {
            std::size_t used = 0;
            id = std::stoll(std::string(id_text), &used);
            if (used != id_text.size()) id = -1;
          } catch (const std::exception&) {
            id = -1;
          }
          if (id < 0 || id >= model.vocab_size) {
            return bad(
                at, "the key must be a token id in [0, " + std::to_string(model.vocab_size) + ")");
          }
          auto b = number(bias, at);
          if (!b) return b.error();
          s.logit_bias.emplace_back(static_cast<std::int32_t>(id), static_cast<float>(*b));
        }
      }
    } else if (key == "logprobs" && api == Api::kCompletions) {
      // Completions: an integer, the number of top alternatives per token.
      if (!v.is_null()) {
        auto x = integer(v, key, 0, sampling::SamplingParams::kMaxLogprobs);
        if (!x) return x.error();
        s.logprobs = static_cast<int>(*x);
        out.logprobs = true;
      }
    } else if (key == "logprobs") {
      if (!v.is_null()) {
        auto b = boolean(v, key);
        if (!b) return b.error();
        chat_logprobs = *b;
      }
    } else if (key == "top_logprobs" && api != Api::kCompletions) {
      if (!v.is_null()) {
        auto x = integer(v, key, 0, sampling::SamplingParams::kMaxLogprobs);
        if (!x) return x.error();
        top_logprobs = static_cast<int>(*x);
      }
    } else if (key == "response_format") {
      r = parse_response_format(v, request.response_format);
    } else if (key == "tools" && api != Api::kCompletions) {
      r = parse_tools(v, tools);
    } else if (key == "tool_choice" && api != Api::kCompletions) {
      r = parse_tool_choice(v, tools);
    } else if (key == "parallel_tool_calls" && api != Api::kCompletions) {
      if (!v.is_null()) {
        auto b = boolean(v, key);
        if (!b) return b.error();
        tools.parallel = *b;
      }
    } else if (key == "stream" && api != Api::kWebSocket) {
      if (!v.is_null()) {
        auto b = boolean(v, key);
        if (!b) return b.error();
        out.stream = *b;
      }
    } else if (key == "stream_options" && api != Api::kWebSocket) {
      if (!v.is_null()) stream_options = &v;
    } else if (key == "user" && api != Api::kWebSocket) {
      // An end-user id for abuse monitoring upstream; nothing here acts on it.
      auto u = string(v, key);
      if (!u) return u.error();
    } else if ((key == "type" || key == "id") && api == Api::kWebSocket) {
      // The frame's envelope, read by the WebSocket session.
    } else {
      return bad(key, "unknown or unsupported parameter");
    }
    if (!r) return r.error();
  }

  if (!have_prompt) {
    return bad(api == Api::kChat          ? "messages"
               : api == Api::kCompletions ? "prompt"
                                          : "prompt",
               api == Api::kWebSocket ? "one of prompt or messages is required" : "is required");
  }
  if (api == Api::kWebSocket && !request.messages.empty() &&
      (!request.prompt.empty() || !request.prompt_ids.empty())) {
    return bad("messages", "give prompt or messages, not both");
  }
  if (tools.has_tools && request.messages.empty()) {
    return bad("tools", "require messages (the chat template renders them)");
  }
  auto spec =
      tool_call_spec(tools, model.tool_call_format, request.response_format.flexible_whitespace);
  if (!spec) return spec.error();
  if (tools.has_tools) request.tools = tools.tools_json;
  if (*spec) {
    if (request.response_format.constrained()) {
      return bad("response_format", "cannot be combined with tools unless tool_choice is \"none\"");
    }
    request.response_format.type = ResponseFormat::Type::kToolCalls;
    request.response_format.source = grammar::tool_call_spec_json(**spec);
    out.tool_calls = model.tool_call_format;
  }
  if (api != Api::kCompletions) {
    if (top_logprobs >= 0 && !chat_logprobs) {
      return bad("top_logprobs", "requires logprobs to be true");
    }
    out.logprobs = chat_logprobs;
    if (chat_logprobs) s.logprobs = std::max(top_logprobs, 0);
  }
  if (best_of > 0 && !use_beam_search) {
    return bad("best_of", "is only supported with use_beam_search (beam_width is the same)");
  }
  if (use_beam_search) {
    s.beam_width = best_of > 0 ? best_of : s.n;
    if (s.beam_width < 2) return bad("use_beam_search", "needs best_of (or n) of at least 2");
  }
  if (stream_options) {
    if (!out.stream) return bad("stream_options", "is only allowed when stream is true");
    if (!stream_options->is_object()) return bad("stream_options", "expected an object");
    for (const auto& [k, value] : stream_options->get_object()) {
      if (k != "include_usage") {
        return bad("stream_options." + std::string(k), "unknown or unsupported parameter");
      }
      auto b = boolean(value, "stream_options.include_usage");
      if (!b) return b.error();
      out.include_usage = *b;
    }
  }
  if (auto valid = sampling::validate(s, model.vocab_size); !valid) {
    // validate() names SamplingParams' fields; chat calls the logprobs count top_logprobs.
    std::string message = valid.error().what();
    if (api != Api::kCompletions && message.starts_with("logprobs:")) {
      message = "top_logprobs" + message.substr(8);
    }
    return Error(ErrorCode::kInvalidArgument, message);
  }
  return out;
}

std::string error_param(const Error& error) {
  const std::string_view message = error.what();
  const std::size_t colon = message.find(": ");
  if (colon == std::string_view::npos || colon == 0) return {};
  const std::string_view head = message.substr(0, colon);
  for (char c : head) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '[' ||
          c == ']' || c == '"' || c == '-')) {
      return {};
    }
  }
  return std::string(head);
}

std::string error_json(std::string_view message, std::string_view type, std::string_view param,
                       std::string_view code) {
  json::object error;
  error["message"] = message;
  error["type"] = type;
  error["param"] = param.empty() ? json::value(nullptr) : json::value(param);
  error["code"] = code.empty() ? json::value(nullptr) : json::value(code);
  return json::serialize(json::object{{"error", std::move(error)}});
}

std::string_view finish_reason_name(FinishReason reason) {
  return to_string(reason);
}

}  // namespace weft::gateway
