#pragma once
// Internal to loaders/: reads a model specification file against a config.json (values that
// are literals or config.json field references, see docs/model-spec.md). Shared by
// model_spec_file.cpp (the core blocks) and model_spec_zoo_blocks.cpp (the blocks the model
// zoo added).

#include <simdjson.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "loaders/mapped_file.hpp"
#include "runtime/model/model_spec.hpp"
#include "weft/error.hpp"

namespace weft::spec_reader {

namespace dom = simdjson::dom;
using model::ModelSpec;

struct JsonDoc {
  std::filesystem::path path;
  dom::parser parser;
  dom::element root;
};

inline Result<void> parse_json(const std::filesystem::path& path, JsonDoc& doc) {
  auto file = MappedFile::open(path);
  if (!file) return file.error();
  doc.path = path;
  simdjson::padded_string padded(file->text());
  if (auto err = doc.parser.parse(padded).get(doc.root)) {
    return Error(ErrorCode::kParse,
                 path.string() + ": not valid JSON (" + simdjson::error_message(err) + ")");
  }
  if (!doc.root.is_object()) {
    return Error(ErrorCode::kParse, path.string() + ": expected a JSON object at the top level");
  }
  return {};
}

inline std::string_view type_name(dom::element e) {
  switch (e.type()) {
    case dom::element_type::ARRAY:
      return "an array";
    case dom::element_type::OBJECT:
      return "an object";
    case dom::element_type::INT64:
    case dom::element_type::UINT64:
      return "an integer";
    case dom::element_type::DOUBLE:
      return "a number";
    case dom::element_type::STRING:
      return "a string";
    case dom::element_type::BOOL:
      return "a boolean";
    case dom::element_type::NULL_VALUE:
      return "null";
  }
  return "a value";
}

// A resolved spec value and where it came from, for messages.
struct Value {
  dom::element element;
  std::string source;  // "config.json field \"x\"" or "spec key \"y\""
};

class SpecReader {
 public:
  SpecReader(JsonDoc& spec, JsonDoc& config) : spec_(spec), config_(config) {}

  // Follows a dotted path ("rope_parameters.rope_theta") in config.json; null counts as absent.
  std::optional<dom::element> config_field(std::string_view dotted) const {
    dom::element at = config_.root;
    std::size_t start = 0;
    while (start <= dotted.size()) {
      const auto dot = dotted.find('.', start);
      const auto key =
          dotted.substr(start, dot == std::string_view::npos ? dotted.npos : dot - start);
      dom::object obj;
      if (at.get(obj) || obj[key].get(at)) return std::nullopt;
      if (dot == std::string_view::npos) break;
      start = dot + 1;
    }
    if (at.is_null()) return std::nullopt;
    return at;
  }

  // A spec node is a literal, or {"field": name | [names], "default": literal,
  // "enabled_by": boolean field}. Absent with no default: nullopt.
  Result<std::optional<Value>> resolve(dom::element node, const std::string& key) const {
    dom::object obj;
    if (node.get(obj) || obj["field"].error()) {
      return std::optional<Value>(
          Value{node, spec_.path.filename().string() + " key \"" + key + "\""});
    }
    std::vector<std::string_view> fields;
    dom::element field_node = obj["field"];
    if (field_node.is_string()) {
      fields.push_back(field_node.get_string().value());
    } else if (field_node.is_array()) {
      dom::array names = field_node.get_array().value();
      for (auto f : names) {
        std::string_view name;
        if (f.get(name)) return spec_error(key, "\"field\" lists must hold strings");
        fields.push_back(name);
      }
    } else {
      return spec_error(key, "\"field\" must be a string or a list of strings");
    }
    std::string_view enabled_by;
    if (!obj["enabled_by"].get(enabled_by)) {
      auto flag = config_field(enabled_by);
      bool on = false;
      if (flag && flag->get(on)) {
        return config_error(std::string(enabled_by), *flag, "a boolean");
      }
      if (!on) {
        // "otherwise": another spec node that gives the value when the flag is off.
        dom::element otherwise;
        if (!obj["otherwise"].get(otherwise)) return resolve(otherwise, key);
        return std::optional<Value>();
      }
    }
    for (auto name : fields) {
      if (auto found = config_field(name)) {
        dom::object map;
        if (!obj["map"].get(map)) return mapped(map, *found, name, key);
        return std::optional<Value>(Value{*found, config_source(name)});
      }
    }
    dom::element fallback;
    if (!obj["default"].get(fallback) && !fallback.is_null()) {
      return std::optional<Value>(
          Value{fallback, config_source(fields.front()) + " (absent; spec default)"});
    }
    return std::optional<Value>();
  }

  // "map": {"true": x, "false": y} turns a config.json value (a boolean, string or integer,
  // written as its JSON text) into a spec literal; a value the map lacks is an error listing
  // the ones it has.
  Result<std::optional<Value>> mapped(dom::object map, dom::element found, std::string_view field,
                                      const std::string& key) const {
    std::string text;
    bool b = false;
    std::int64_t i = 0;
    std::string_view str;
    if (!found.get(b)) {
      text = b ? "true" : "false";
    } else if (!found.get(i)) {
      text = std::to_string(i);
    } else if (!found.get(str)) {
      text = std::string(str);
    } else {
      return config_error(std::string(field), found, "a boolean, integer or string");
    }
    std::string known;
    for (auto [k, v] : map) {
      if (k == text) {
        return std::optional<Value>(Value{v, config_source(field) + " = " + text + " (spec map)"});
      }
      known += (known.empty() ? "" : ", ") + std::string(k);
    }
    return Error(ErrorCode::kUnsupported,
                 config_.path.string() + ": field \"" + std::string(field) + "\" is " + text +
                     ", which the spec " + spec_.path.filename().string() + " (key \"" + key +
                     "\") does not support; supported: " + known);
  }

  Result<std::optional<Value>> resolve_key(dom::element parent, const std::string& key,
                                           const std::string& path) const {
    dom::element node;
    if (parent.get_object().value()[key].get(node)) return std::optional<Value>();
    return resolve(node, path);
  }

  template <class T>
  Result<T> required(const std::optional<Value>& v, const std::string& key,
                     const char* expected) const {
    if (!v)
      return spec_error(
          key,
          std::string("has no value: config.json lacks its field and the spec gives no default"));
    return convert<T>(*v, expected);
  }

  template <class T>
  Result<T> convert(const Value& v, const char* expected) const {
    T out{};
    if constexpr (std::is_same_v<T, double>) {
      if (v.element.is_number()) return v.element.get_double().value();
    } else if constexpr (std::is_same_v<T, std::int64_t>) {
      if (v.element.is_int64()) return v.element.get_int64().value();
      if (v.element.is_uint64()) return static_cast<std::int64_t>(v.element.get_uint64().value());
      // An integral double (e.g. 1e4) is fine; a fractional one is not an integer.
      if (v.element.is_double()) {
        const double d = v.element.get_double().value();
        // Only inside int64's range may the double be converted (1e28 would be undefined
        // behaviour; found by fuzz_config_json).
        constexpr double kTwo63 = 9223372036854775808.0;
        if (d >= -kTwo63 && d < kTwo63 && d == static_cast<double>(static_cast<std::int64_t>(d)))
          return static_cast<std::int64_t>(d);
      }
    } else if constexpr (std::is_same_v<T, bool>) {
      if (!v.element.get(out)) return out;
    } else if constexpr (std::is_same_v<T, std::string>) {
      std::string_view s;
      if (!v.element.get(s)) return std::string(s);
    }
    return Error(
        ErrorCode::kInvalidArgument,
        (v.source.rfind("config.json", 0) == 0 ? config_.path.string() : spec_.path.string()) +
            ": " + v.source + " is " + std::string(type_name(v.element)) + ", expected " +
            expected);
  }

  Error spec_error(const std::string& key, const std::string& what) const {
    return Error(ErrorCode::kParse, spec_.path.string() + ": key \"" + key + "\" " + what);
  }
  Error config_error(const std::string& field, dom::element e, const char* expected) const {
    return Error(ErrorCode::kInvalidArgument, config_.path.string() + ": field \"" + field +
                                                  "\" is " + std::string(type_name(e)) +
                                                  ", expected " + expected);
  }
  static std::string config_source(std::string_view field) {
    return "config.json field \"" + std::string(field) + "\"";
  }

  JsonDoc& spec_;
  JsonDoc& config_;
};

template <class E>
Result<E> choose(const SpecReader& r, const std::string& key, const std::string& value,
                 std::initializer_list<std::pair<const char*, E>> options) {
  std::string names;
  for (const auto& [name, e] : options) {
    if (value == name) return e;
    names += names.empty() ? "" : ", ";
    names += name;
  }
  return r.spec_error(key, "is \"" + value + "\", expected one of: " + names);
}

// `var` names a new variable, so it cannot be parenthesised.
// NOLINTNEXTLINE(bugprone-macro-parentheses)
#define WEFT_TRY(var, expr)                       \
  auto var##_result = (expr);                     \
  if (!var##_result) return var##_result.error(); \
  auto var = std::move(var##_result.value())

// The blocks the model zoo added (model_spec_zoo_blocks.cpp): norm placement and weight
// offset, embedding scale, learned positions, parallel attention, linear layout.
Result<void> read_zoo_blocks(const SpecReader& r, dom::element root, model::ModelSpec& s);

// Encoder-decoder networks (model_spec_seq2seq.cpp): the "encoder_decoder" section and the
// "encoder" and "cross_attention" objects of "tensors".
Result<void> read_seq2seq_blocks(const SpecReader& r, dom::element root, model::ModelSpec& s);

// longrope ("su") rope scaling: short_factor and long_factor from the rope_scaling object,
// original_max_position_embeddings from position_embedding or the object.
Result<void> read_longrope(const SpecReader& r, dom::element pos, dom::object scaling,
                           const std::string& source, std::optional<double> factor,
                           std::optional<double> original, model::ModelSpec& s);

}  // namespace weft::spec_reader
