// The request parameters' checks (gateway_openai_params.hpp).
#include "actors/gateway_openai_params.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>

#include "actors/gateway_tool_calls.hpp"

namespace weft::gateway::detail {
namespace json = boost::json;

Error bad(std::string_view param, const std::string& what) {
  return Error(ErrorCode::kInvalidArgument, std::string(param) + ": " + what);
}

namespace {

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

}  // namespace

Result<double> number(const json::value& v, std::string_view param) {
  if (v.is_int64()) return static_cast<double>(v.get_int64());
  if (v.is_uint64()) return static_cast<double>(v.get_uint64());
  if (v.is_double() && std::isfinite(v.get_double())) return v.get_double();
  return bad(param, "expected a number, got " + kind_of(v));
}

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

}  // namespace weft::gateway::detail
