#include "loaders/chat_template_file.hpp"

#include <simdjson.h>

#include <cerrno>
#include <cstdlib>

#include "loaders/gguf_model.hpp"
#include "loaders/gguf_tokenizer.hpp"
#include "loaders/mapped_file.hpp"

namespace weft {
namespace {

namespace od = simdjson::ondemand;

// Nesting deeper than this is refused (the recursion below follows the document's depth).
constexpr int kMaxJsonDepth = 100;

Error json_error(std::string_view source, simdjson::error_code err) {
  return Error(ErrorCode::kParse,
               std::string(source) + ": not valid JSON (" + simdjson::error_message(err) + ")");
}

// A JSON number as Python's json module reads it: an int unless it has a fraction or an
// exponent. Integers beyond 64 bits (model_max_length is often 1e30 written out) become
// floats; Python keeps them exact, but no template prints them.
jinja::Value number_value(std::string_view raw) {
  while (!raw.empty() &&
         (raw.back() == ' ' || raw.back() == '\n' || raw.back() == '\r' || raw.back() == '\t')) {
    raw.remove_suffix(1);
  }
  std::string text(raw);
  if (text.find_first_of(".eE") == std::string::npos) {
    errno = 0;
    long long i = std::strtoll(text.c_str(), nullptr, 10);
    if (errno != ERANGE) return jinja::Value(static_cast<std::int64_t>(i));
  }
  return jinja::Value(std::strtod(text.c_str(), nullptr));
}

Result<jinja::Value> to_value(od::value v, std::string_view source, int depth) {
  if (depth > kMaxJsonDepth) {
    return Error(ErrorCode::kParse, std::string(source) + ": JSON nests deeper than 100 levels");
  }
  od::json_type type;
  if (auto err = v.type().get(type)) return json_error(source, err);
  switch (type) {
    case od::json_type::null: {
      bool is_null = false;
      if (auto err = v.is_null().get(is_null); err || !is_null) {
        return json_error(source, err ? err : simdjson::N_ATOM_ERROR);
      }
      return jinja::Value::none();
    }
    case od::json_type::boolean: {
      bool b = false;
      if (auto err = v.get_bool().get(b)) return json_error(source, err);
      return jinja::Value(b);
    }
    case od::json_type::number: {
      std::string_view raw = v.raw_json_token();
      double check = 0;
      if (auto err = v.get_double().get(check)) return json_error(source, err);
      return number_value(raw);
    }
    case od::json_type::string: {
      std::string_view s;
      if (auto err = v.get_string().get(s)) return json_error(source, err);
      return jinja::Value(std::string(s));
    }
    case od::json_type::array: {
      od::array array;
      if (auto err = v.get_array().get(array)) return json_error(source, err);
      jinja::List list;
      for (auto item : array) {
        od::value element;
        if (auto err = item.get(element)) return json_error(source, err);
        auto converted = to_value(element, source, depth + 1);
        if (!converted) return converted.error();
        list.push_back(std::move(converted).value());
      }
      return jinja::Value(std::move(list));
    }
    case od::json_type::object: {
      od::object object;
      if (auto err = v.get_object().get(object)) return json_error(source, err);
      jinja::Dict dict;
      for (auto field : object) {
        std::string_view key;
        if (auto err = field.unescaped_key().get(key)) return json_error(source, err);
        std::string owned(key);
        od::value element;
        if (auto err = field.value().get(element)) return json_error(source, err);
        auto converted = to_value(element, source, depth + 1);
        if (!converted) return converted.error();
        dict.set(std::move(owned), std::move(converted).value());
      }
      return jinja::Value(std::move(dict));
    }
  }
  return Error(ErrorCode::kInternal, std::string(source) + ": unknown JSON value type");
}

Result<std::string> read_text(const std::filesystem::path& path) {
  auto file = MappedFile::open(path);
  if (!file) return file.error();
  return std::string(file->text());
}

// A special token's text: a string, or an AddedToken object {"content": ...}.
std::optional<jinja::Value> token_value(const jinja::Value& v) {
  if (v.is_string()) return v;
  if (v.is_dict()) {
    if (const jinja::Value* content = v.as_dict().find("content");
        content && content->is_string()) {
      return *content;
    }
  }
  return std::nullopt;
}

// transformers' SPECIAL_TOKENS_ATTRIBUTES, in its order.
constexpr std::string_view kSpecialTokens[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                               "pad_token", "cls_token", "mask_token"};

void collect_special_tokens(const jinja::Dict& config, jinja::Dict& out) {
  for (std::string_view name : kSpecialTokens) {
    if (const jinja::Value* v = config.find(name)) {
      if (auto token = token_value(*v)) out.set(std::string(name), *token);
    }
  }
  if (const jinja::Value* extra = config.find("additional_special_tokens");
      extra && extra->is_list()) {
    jinja::List tokens;
    for (const jinja::Value& t : extra->as_list()) {
      if (auto token = token_value(t)) tokens.push_back(*token);
    }
    out.set("additional_special_tokens", jinja::Value(std::move(tokens)));
  }
}

}  // namespace

Result<jinja::Value> parse_json_value(std::string_view json, std::string_view source_name) {
  od::parser parser;
  simdjson::padded_string padded(json);
  od::document doc;
  if (auto err = parser.iterate(padded).get(doc)) return json_error(source_name, err);
  od::json_type type;
  if (auto err = doc.type().get(type)) return json_error(source_name, err);
  if (type != od::json_type::object && type != od::json_type::array) {
    return Error(ErrorCode::kParse,
                 std::string(source_name) + ": expected a JSON object or array at the top level");
  }
  od::value root;
  if (auto err = doc.get_value().get(root)) return json_error(source_name, err);
  return to_value(root, source_name, 0);
}

Result<jinja::Value> read_json_value_file(const std::filesystem::path& path) {
  auto text = read_text(path);
  if (!text) return text.error();
  return parse_json_value(text.value(), path.string());
}

Result<ChatTemplateFile> read_chat_template_file(const std::filesystem::path& path) {
  if (is_gguf_file(path)) return read_gguf_chat_template(path);
  std::error_code ec;
  // A missing tokenizer_config.json is fine when chat_template.jinja lies beside it; a path
  // that is neither is named as it was given, not as the folder above it.
  if (!std::filesystem::exists(path, ec) &&
      !std::filesystem::exists(path.parent_path() / "chat_template.jinja", ec)) {
    return Error(ErrorCode::kNotFound,
                 path.string() +
                     ": no such folder or file (expected a model folder holding "
                     "tokenizer_config.json or chat_template.jinja, or a tokenizer_config.json)");
  }
  bool is_dir = std::filesystem::is_directory(path, ec);
  std::filesystem::path dir = is_dir ? path : path.parent_path();
  std::filesystem::path config_path = is_dir ? path / "tokenizer_config.json" : path;

  ChatTemplateFile result;
  result.path = config_path;
  jinja::Dict config;
  bool have_config = std::filesystem::exists(config_path, ec);
  if (have_config) {
    auto parsed = read_json_value_file(config_path);
    if (!parsed) return parsed.error();
    if (!parsed->is_dict()) {
      return Error(ErrorCode::kParse,
                   config_path.string() + ": expected a JSON object at the top level");
    }
    config = parsed->as_dict();
    collect_special_tokens(config, result.special_tokens);
  }
  std::filesystem::path map_path = dir / "special_tokens_map.json";
  if (std::filesystem::exists(map_path, ec)) {
    auto parsed = read_json_value_file(map_path);
    if (!parsed) return parsed.error();
    if (parsed->is_dict()) collect_special_tokens(parsed->as_dict(), result.special_tokens);
  }

  std::filesystem::path jinja_path = dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja_path, ec)) {
    auto text = read_text(jinja_path);
    if (!text) return text.error();
    result.path = jinja_path;
    result.templates.emplace_back("default", std::move(text).value());
    return result;
  }
  if (!have_config) {
    return Error(
        ErrorCode::kNotFound,
        config_path.string() + ": no such file, and no chat_template.jinja in " + dir.string());
  }
  const jinja::Value* field = config.find("chat_template");
  if (field == nullptr || field->is_none()) {
    return Error(ErrorCode::kNotFound,
                 config_path.string() +
                     ": has no \"chat_template\" and there is no chat_template.jinja beside it; "
                     "this model has no chat template to render messages with");
  }
  if (field->is_string()) {
    result.templates.emplace_back("default", field->as_string());
    return result;
  }
  if (field->is_list()) {
    for (const jinja::Value& entry : field->as_list()) {
      const jinja::Value* name = entry.is_dict() ? entry.as_dict().find("name") : nullptr;
      const jinja::Value* text = entry.is_dict() ? entry.as_dict().find("template") : nullptr;
      if (!name || !text || !name->is_string() || !text->is_string()) {
        return Error(ErrorCode::kParse,
                     config_path.string() +
                         ": \"chat_template\" list entries must be {\"name\": string, "
                         "\"template\": string}");
      }
      result.templates.emplace_back(name->as_string(), text->as_string());
    }
    return result;
  }
  return Error(ErrorCode::kParse, config_path.string() +
                                      ": \"chat_template\" must be a string or a list of named "
                                      "templates, not " +
                                      field->type_name());
}

Result<ChatTemplate> load_chat_template(const std::filesystem::path& path, bool with_tools) {
  auto file = read_chat_template_file(path);
  if (!file) return file.error();
  const std::string* chosen = nullptr;
  std::string chosen_name;
  for (const auto& [name, text] : file->templates) {
    if (name == "tool_use" && with_tools) {
      chosen = &text;
      chosen_name = name;
    }
  }
  for (const auto& [name, text] : file->templates) {
    if (chosen == nullptr && name == "default") {
      chosen = &text;
      chosen_name = name;
    }
  }
  if (chosen == nullptr) {
    std::string names;
    for (const auto& [name, text] : file->templates)
      names += (names.empty() ? "" : ", ") + name;
    return Error(ErrorCode::kNotFound,
                 file->path.string() +
                     ": no chat template named \"default\" (the file names: " + names + ")");
  }
  std::string source_name = file->path.string();
  if (file->path.extension() == ".json") source_name += " (chat_template \"" + chosen_name + "\")";
  return ChatTemplate::parse(*chosen, source_name, file->special_tokens);
}

}  // namespace weft
