#include <boost/json.hpp>
#include <set>

#include "actors/gateway_tool_calls.hpp"

namespace weft::gateway {
namespace json = boost::json;

namespace {

Error bad(const std::string& param, const std::string& what) {
  return Error(ErrorCode::kInvalidArgument, param + ": " + what);
}

// OpenAI's rule for function names.
bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  }
  return true;
}

}  // namespace

Result<void> parse_tools(const json::value& v, ToolsRequest& out) {
  if (v.is_null()) return {};
  if (!v.is_array() || v.get_array().empty()) {
    return bad("tools",
               "expected a non-empty array of {\"type\": \"function\", \"function\": "
               "{name, description, parameters}} objects");
  }
  std::set<std::string> names;
  const json::array& tools = v.get_array();
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const std::string at = "tools[" + std::to_string(i) + "]";
    const json::object* tool = tools[i].if_object();
    if (!tool) return bad(at, "expected an object");
    for (const auto& [key, value] : *tool) {
      if (key != "type" && key != "function") {
        return bad(at + "." + std::string(key), "unknown or unsupported parameter");
      }
    }
    const json::value* type = tool->if_contains("type");
    if (!type || !type->is_string() || type->get_string() != "function") {
      return bad(at + ".type", "must be \"function\"");
    }
    const json::value* function = tool->if_contains("function");
    if (!function || !function->is_object())
      return bad(at + ".function", "is required (an object)");
    grammar::ToolFunction f;
    f.index = static_cast<int>(i);
    bool have_name = false;
    for (const auto& [key, value] : function->get_object()) {
      const std::string fat = at + ".function." + std::string(key);
      if (key == "name") {
        if (!value.is_string() || !valid_name(value.get_string())) {
          return bad(fat, "expected a name of 1 to 64 letters, digits, '_' or '-'");
        }
        f.name = std::string(value.get_string());
        have_name = true;
      } else if (key == "description") {
        if (!value.is_string() && !value.is_null()) return bad(fat, "expected a string");
      } else if (key == "parameters") {
        if (value.is_null()) continue;
        if (!value.is_object()) return bad(fat, "expected a JSON Schema object");
        f.parameters = json::serialize(value);
      } else if (key == "strict") {
        if (!value.is_bool() && !value.is_null()) return bad(fat, "expected a boolean");
        f.strict = value.is_bool() && value.get_bool();
      } else {
        return bad(fat, "unknown or unsupported parameter");
      }
    }
    if (!have_name) return bad(at + ".function.name", "is required");
    if (!names.insert(f.name).second) {
      return bad(at + ".function.name", "\"" + f.name + "\" names an earlier tool too");
    }
    out.functions.push_back(std::move(f));
  }
  out.has_tools = true;
  out.tools_json = json::serialize(v);
  return {};
}

Result<void> parse_tool_choice(const json::value& v, ToolsRequest& out) {
  if (v.is_null()) return {};
  if (v.is_string()) {
    const std::string_view c = v.get_string();
    if (c != "none" && c != "auto" && c != "required") {
      return bad("tool_choice", "\"" + std::string(c) +
                                    "\" is not one of none, auto, required or "
                                    "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    out.choice = std::string(c);
    return {};
  }
  const json::object* o = v.if_object();
  if (!o) return bad("tool_choice", "expected a string or an object");
  const json::value* type = o->if_contains("type");
  if (!type || !type->is_string() || type->get_string() != "function") {
    return bad("tool_choice.type", "must be \"function\"");
  }
  const json::value* function = o->if_contains("function");
  const json::value* name =
      function && function->is_object() ? function->get_object().if_contains("name") : nullptr;
  if (!name || !name->is_string()) {
    return bad("tool_choice.function.name", "is required (a string)");
  }
  out.choice = "function";
  out.named = std::string(name->get_string());
  return {};
}

Result<std::optional<grammar::ToolCallSpec>> tool_call_spec(const ToolsRequest& request,
                                                            grammar::ToolCallFormat format,
                                                            bool flexible_whitespace) {
  if (!request.has_tools) {
    if (!request.choice.empty() && request.choice != "none") {
      return bad("tool_choice", "is only allowed when tools are given");
    }
    return std::optional<grammar::ToolCallSpec>();
  }
  if (request.choice == "none") return std::optional<grammar::ToolCallSpec>();
  grammar::ToolCallSpec spec;
  spec.format = format;
  spec.required = request.choice == "required" || request.choice == "function";
  spec.parallel = request.parallel;
  spec.flexible_whitespace = flexible_whitespace;
  if (request.choice == "function") {
    for (const auto& f : request.functions) {
      if (f.name == request.named) spec.functions.push_back(f);
    }
    if (spec.functions.empty()) {
      return bad("tool_choice.function.name", "\"" + request.named + "\" is not one of the tools");
    }
  } else {
    spec.functions = request.functions;
  }
  auto grammar = grammar::tool_call_grammar(spec);
  if (!grammar) return Error(ErrorCode::kInvalidArgument, grammar.error().what());
  return std::optional<grammar::ToolCallSpec>(std::move(spec));
}

Result<void> parse_message_tool_calls(const json::value& v, const std::string& at,
                                      std::vector<ChatToolCall>& out) {
  if (v.is_null()) return {};
  if (!v.is_array()) return bad(at, "expected an array of tool calls");
  const json::array& calls = v.get_array();
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const std::string cat = at + "[" + std::to_string(i) + "]";
    const json::object* call = calls[i].if_object();
    if (!call) return bad(cat, "expected an object");
    ChatToolCall c;
    if (const json::value* id = call->if_contains("id")) {
      if (!id->is_string()) return bad(cat + ".id", "expected a string");
      c.id = std::string(id->get_string());
    }
    if (const json::value* type = call->if_contains("type");
        type && (!type->is_string() || type->get_string() != "function")) {
      return bad(cat + ".type", "must be \"function\"");
    }
    const json::value* function = call->if_contains("function");
    if (!function || !function->is_object()) return bad(cat + ".function", "is required");
    const json::value* name = function->get_object().if_contains("name");
    if (!name || !name->is_string()) return bad(cat + ".function.name", "is required (a string)");
    c.name = std::string(name->get_string());
    const json::value* arguments = function->get_object().if_contains("arguments");
    if (!arguments || !arguments->is_string()) {
      return bad(cat + ".function.arguments", "is required (a JSON string)");
    }
    c.arguments = std::string(arguments->get_string());
    out.push_back(std::move(c));
  }
  return {};
}

}  // namespace weft::gateway
