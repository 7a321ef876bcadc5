#include "actors/gateway_openai.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <limits>
#include <set>

#include "actors/gateway_tool_calls.hpp"
#include "runtime/sampling/sampling_params.hpp"

namespace weft::gateway {
namespace json = boost::json;

namespace {

Error bad(std::string_view param, const std::string& what) {
  return Error(ErrorCode::kInvalidArgument, std::string(param) + ": " + what);
}

std::string kind_of(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null:
      return "null";
    case json::kind::bool_:
      return "a boolean";
    case json::kind::int64:
    case json::kind::uint64:
    case json::kind::double_:
      return "a number";
    case json::kind::string:
      return "a string";
    case json::kind::array:
      return "an array";
    case json::kind::object:
      return "an object";
  }
  return "a value";
}

Result<double> number(const json::value& v, std::string_view param) {
  if (v.is_int64()) return static_cast<double>(v.get_int64());
  if (v.is_uint64()) return static_cast<double>(v.get_uint64());
  if (v.is_double() && std::isfinite(v.get_double())) return v.get_double();
  return bad(param, "expected a number, got " + kind_of(v));
}

// An integer in [lo, hi]; a double with an integral value counts (JSON has one number type).
Result<std::int64_t> integer(const json::value& v, std::string_view param, std::int64_t lo,
                             std::int64_t hi) {
  std::int64_t x = 0;
  if (v.is_int64()) {
    x = v.get_int64();
  } else if (v.is_uint64()) {
    if (v.get_uint64() > static_cast<std::uint64_t>(hi)) {
      return bad(param, std::to_string(v.get_uint64()) + " is outside [" + std::to_string(lo) +
                            ", " + std::to_string(hi) + "]");
    }
    x = static_cast<std::int64_t>(v.get_uint64());
  } else if (v.is_double() && std::isfinite(v.get_double()) &&
             std::floor(v.get_double()) == v.get_double() && std::fabs(v.get_double()) < 9e18) {
    x = static_cast<std::int64_t>(v.get_double());
  } else {
    return bad(param, "expected an integer, got " + kind_of(v));
  }
  if (x < lo || x > hi) {
    return bad(param, std::to_string(x) + " is outside [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "]");
  }
  return x;
}

Result<bool> boolean(const json::value& v, std::string_view param) {
  if (v.is_bool()) return v.get_bool();
  return bad(param, "expected a boolean, got " + kind_of(v));
}

Result<std::string> string(const json::value& v, std::string_view param) {
  if (v.is_string()) return std::string(v.get_string());
  return bad(param, "expected a string, got " + kind_of(v));
}

constexpr std::int64_t kMaxInt = std::numeric_limits<int>::max();

// The `stop` parameter: a string or an array of strings; null is none.
// A null value leaves `out` as it is; else an array of ids below vocab_size, appended.
Result<void> parse_token_ids(const json::value& v, const std::string& param, int vocab_size,
                             std::vector<std::int32_t>& out) {
  if (v.is_null()) return {};
  if (!v.is_array()) return bad(param, "expected an array of token ids");
  for (std::size_t i = 0; i < v.get_array().size(); ++i) {
    auto id = integer(v.get_array()[i], param + "[" + std::to_string(i) + "]", 0, vocab_size - 1);
    if (!id) return id.error();
    out.push_back(static_cast<std::int32_t>(*id));
  }
  return {};
}

Result<void> parse_stop(const json::value& v, std::vector<std::string>& stop) {
  if (v.is_null()) return {};
  if (v.is_string()) {
    stop.emplace_back(v.get_string());
    return {};
  }
  if (!v.is_array()) return bad("stop", "expected a string or an array of strings");
  for (std::size_t i = 0; i < v.get_array().size(); ++i) {
    auto s = string(v.get_array()[i], "stop[" + std::to_string(i) + "]");
    if (!s) return s.error();
    stop.push_back(std::move(*s));
  }
  return {};
}

Result<void> parse_messages(const json::value& v, std::vector<ChatMessage>& messages) {
  if (!v.is_array() || v.get_array().empty()) {
    return bad("messages", "expected a non-empty array of {role, content} objects");
  }
  const json::array& array = v.get_array();
  for (std::size_t i = 0; i < array.size(); ++i) {
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!array[i].is_object()) return bad(at, "expected an object, got " + kind_of(array[i]));
    const json::object& m = array[i].get_object();
    ChatMessage message;
    const json::value* role = m.if_contains("role");
    if (!role) return bad(at + ".role", "is required");
    auto r = string(*role, at + ".role");
    if (!r) return r.error();
    if (*r != "system" && *r != "user" && *r != "assistant" && *r != "developer" && *r != "tool") {
      return bad(at + ".role",
                 "\"" + *r + "\" is not one of system, developer, user, assistant, tool");
    }
    message.role = std::move(*r);
    for (const auto& [key, value] : m) {
      if (key == "role" || key == "content") continue;
      const std::string kat = at + "." + std::string(key);
      if (key == "name") {
        auto n = string(value, kat);
        if (!n) return n.error();
        message.name = std::move(*n);
      } else if (key == "tool_call_id" && message.role == "tool") {
        auto id = string(value, kat);
        if (!id) return id.error();
        message.tool_call_id = std::move(*id);
      } else if (key == "tool_calls" && message.role == "assistant") {
        auto calls = parse_message_tool_calls(value, kat, message.tool_calls);
        if (!calls) return calls.error();
      } else {
        return bad(kat, "is not supported");
      }
    }
    if (message.role == "tool" && message.tool_call_id.empty()) {
      return bad(at + ".tool_call_id", "is required for a tool message");
    }
    const json::value* content = m.if_contains("content");
    if ((!content || content->is_null()) && !message.tool_calls.empty()) {
      messages.push_back(std::move(message));
      continue;
    }
    if (!content) return bad(at + ".content", "is required");
    if (content->is_string()) {
      message.content = std::string(content->get_string());
    } else if (content->is_array()) {
      // Content parts: only text parts, concatenated, since the model reads text alone.
      const json::array& parts = content->get_array();
      for (std::size_t j = 0; j < parts.size(); ++j) {
        const std::string pat = at + ".content[" + std::to_string(j) + "]";
        const json::object* part = parts[j].if_object();
        const json::value* type = part ? part->if_contains("type") : nullptr;
        if (!type || !type->is_string() || type->get_string() != "text") {
          return bad(pat, "only {\"type\":\"text\",\"text\":...} parts are supported");
        }
        const json::value* text = part->if_contains("text");
        if (!text) return bad(pat + ".text", "is required");
        auto t = string(*text, pat + ".text");
        if (!t) return t.error();
        message.content += *t;
      }
    } else {
      return bad(at + ".content",
                 "expected a string or an array of text parts, got " + kind_of(*content));
    }
    messages.push_back(std::move(message));
  }
  return {};
}

Result<void> parse_prompt(const json::value& v, GenerateRequest& request, int vocab_size) {
  if (v.is_string()) {
    request.prompt = std::string(v.get_string());
    if (request.prompt.empty()) return bad("prompt", "is empty");
    return {};
  }
  if (v.is_array()) {
    const json::array& a = v.get_array();
    if (a.size() == 1 && a[0].is_string()) return parse_prompt(a[0], request, vocab_size);
    if (!a.empty() && !a[0].is_string() && !a[0].is_array()) {
      for (std::size_t i = 0; i < a.size(); ++i) {
        auto id = integer(a[i], "prompt[" + std::to_string(i) + "]", 0, vocab_size - 1);
        if (!id) return id.error();
        request.prompt_ids.push_back(static_cast<std::int32_t>(*id));
      }
      return {};
    }
    if (a.size() > 1) return bad("prompt", "several prompts in one request are not supported");
  }
  return bad("prompt", "expected a non-empty string or an array of token ids");
}

// response_format: OpenAI's {"type":"text"}, {"type":"json_object"} and {"type":"json_schema",
// "json_schema":{"name","description","schema","strict"}}, and Weft's {"type":"regex",
// "regex":"..."} and {"type":"grammar","grammar":"..."} (EBNF text). Only the shape is checked
// here; the engine compiles the schema, regex or grammar when the request is submitted and
// its errors (keyword, offset, line and column) come back as `response_format: ...`.
Result<void> parse_response_format(const json::value& v, ResponseFormat& format) {
  const std::string at = "response_format";
  if (v.is_null()) return {};
  if (!v.is_object()) return bad(at, "expected an object, got " + kind_of(v));
  const json::object& o = v.get_object();
  const json::value* type = o.if_contains("type");
  if (type == nullptr || !type->is_string()) return bad(at + ".type", "is required (a string)");
  const std::string t(type->get_string());
  auto only = [&](std::initializer_list<std::string_view> allowed) -> Result<void> {
    for (const auto& [k, value] : o) {
      if (k == "type" || k == "flexible_whitespace") continue;
      if (std::find(allowed.begin(), allowed.end(), std::string_view(k)) == allowed.end()) {
        return bad(at + "." + std::string(k), "unknown or unsupported for type \"" + t + "\"");
      }
    }
    return {};
  };
  auto source = [&](const char* key) -> Result<std::string> {
    const json::value* x = o.if_contains(key);
    if (x == nullptr || !x->is_string() || x->get_string().empty()) {
      return bad(at + "." + key, "is required (a non-empty string) for type \"" + t + "\"");
    }
    return std::string(x->get_string());
  };
  Result<void> r;
  if (t == "text") {
    r = only({});
    format.type = ResponseFormat::Type::kText;
  } else if (t == "json_object") {
    r = only({});
    format.type = ResponseFormat::Type::kJsonObject;
  } else if (t == "json_schema") {
    r = only({"json_schema"});
    if (!r) return r;
    const json::value* js = o.if_contains("json_schema");
    if (js == nullptr || !js->is_object()) {
      return bad(at + ".json_schema", "is required (an object with the schema)");
    }
    const json::value* schema = nullptr;
    for (const auto& [k, value] : js->get_object()) {
      if (k == "schema") {
        schema = &value;
      } else if (k == "name" || k == "description") {
        if (!value.is_string())
          return bad(at + ".json_schema." + std::string(k), "expected a string");
      } else if (k == "strict") {
        // strict: a keyword that cannot be enforced exactly is an error naming its JSON
        // pointer; otherwise it is skipped (docs/http-api.md#response_format).
        if (!value.is_bool() && !value.is_null()) {
          return bad(at + ".json_schema.strict", "expected a boolean");
        }
        format.strict = !value.is_bool() || value.get_bool();
      } else {
        return bad(at + ".json_schema." + std::string(k), "unknown or unsupported parameter");
      }
    }
    if (schema == nullptr) return bad(at + ".json_schema.schema", "is required");
    if (!schema->is_object() && !schema->is_bool()) {
      return bad(at + ".json_schema.schema", "expected an object, got " + kind_of(*schema));
    }
    format.type = ResponseFormat::Type::kJsonSchema;
    format.source = json::serialize(*schema);
  } else if (t == "regex" || t == "grammar") {
    r = only({t});
    if (!r) return r;
    auto text = source(t.c_str());
    if (!text) return text.error();
    format.type = t == "regex" ? ResponseFormat::Type::kRegex : ResponseFormat::Type::kGrammar;
    format.source = std::move(text.value());
  } else {
    return bad(at + ".type",
               "\"" + t + "\" is not one of text, json_object, json_schema, regex, grammar");
  }
  if (!r) return r;
  if (const json::value* ws = o.if_contains("flexible_whitespace")) {
    auto b = boolean(*ws, at + ".flexible_whitespace");
    if (!b) return b.error();
    format.flexible_whitespace = *b;
  }
  return {};
}

// `speculation` (docs/speculative.md#per-request): {"method": "off" | "prompt-lookup" | "draft",
// "tokens": N}, both optional; a bare string is the method. null: the server's choice.
Result<void> parse_speculation(const json::value& v, sampling::SamplingParams& s) {
  if (v.is_null()) return {};
  auto method = [&s](const json::value& m, const std::string& at) -> Result<void> {
    if (m.is_null()) return {};
    auto name = string(m, at);
    if (!name) return name.error();
    if (*name != "off" && *name != "prompt-lookup" && *name != "draft") {
      return bad(at, "\"" + *name + "\" is not one of off, prompt-lookup, draft");
    }
    s.speculate = *name;
    return {};
  };
  if (v.is_string()) return method(v, "speculation");
  if (!v.is_object()) {
    return bad("speculation",
               "expected an object {\"method\": ..., \"tokens\": N}, got " + kind_of(v));
  }
  for (const auto& [key, field] : v.get_object()) {
    if (key == "method") {
      if (auto r = method(field, "speculation.method"); !r) return r;
    } else if (key == "tokens") {
      if (field.is_null()) continue;
      auto n = integer(field, "speculation.tokens", 1, sampling::SamplingParams::kMaxSpecTokens);
      if (!n) return n.error();
      s.spec_tokens = static_cast<int>(*n);
    } else {
      return bad("speculation." + std::string(key), "unknown field (method and tokens are known)");
    }
  }
  return {};
}

}  // namespace

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
