#include "loaders/model_spec_encoder.hpp"

#include <simdjson.h>

#include <optional>
#include <string>

#include "loaders/mapped_file.hpp"

namespace weft {
namespace {

namespace dom = simdjson::dom;

struct Json {
  std::filesystem::path path;
  dom::parser parser;
  dom::element root;
};

Result<void> parse(const std::filesystem::path& path, Json& doc) {
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

// The encoder section's values: a literal, or {"field": name | [names], "default": literal,
// "add": integer} as the rest of the spec format (the "add" lets RoBERTa say
// padding_idx + 1).
class EncoderReader {
 public:
  EncoderReader(const Json& spec, const Json& config) : spec_(spec), config_(config) {}

  Result<std::optional<std::int64_t>> integer(dom::object section, const char* key) const {
    dom::element node;
    if (section[key].get(node)) return std::optional<std::int64_t>();
    const std::string where = std::string("encoder.") + key;
    std::int64_t add = 0;
    dom::element value = node;
    std::string source = spec_.path.string() + ": key \"" + where + "\"";
    dom::object obj;
    if (!node.get(obj) && !obj["field"].error()) {
      if (auto a = obj["add"]; !a.error() && a.get(add)) {
        return Error(ErrorCode::kParse, source + ": \"add\" must be an integer");
      }
      std::vector<std::string_view> fields;
      dom::element f = obj["field"];
      if (f.is_string()) {
        fields.push_back(f.get_string().value());
      } else if (f.is_array()) {
        dom::array names = f.get_array().value();
        for (auto e : names) {
          std::string_view name;
          if (e.get(name))
            return Error(ErrorCode::kParse, source + ": \"field\" must hold strings");
          fields.push_back(name);
        }
      } else {
        return Error(ErrorCode::kParse, source + ": \"field\" must be a string or list of strings");
      }
      bool found = false;
      for (auto name : fields) {
        dom::element e;
        if (!config_.root[name].get(e) && !e.is_null()) {
          value = e;
          source = config_.path.string() + ": field \"" + std::string(name) + "\"";
          found = true;
          break;
        }
      }
      if (!found && (obj["default"].get(value) || value.is_null())) {
        return Error(ErrorCode::kInvalidArgument,
                     config_.path.string() + ": field \"" + std::string(fields.front()) +
                         "\" (spec key \"" + where + "\") is absent and the spec gives no default");
      }
    }
    std::int64_t out = 0;
    if (value.get(out) || out < 0 || out > (1 << 30)) {
      return Error(ErrorCode::kInvalidArgument,
                   source + " must be a non-negative integer, got " + simdjson::to_string(value));
    }
    return std::optional<std::int64_t>(out + add);
  }

 private:
  const Json& spec_;
  const Json& config_;
};

}  // namespace

Result<void> read_encoder_spec(const std::filesystem::path& spec_file,
                               const std::filesystem::path& config_json, model::ModelSpec& spec) {
  Json s, c;
  if (auto ok = parse(spec_file, s); !ok) return ok;
  if (auto ok = parse(config_json, c); !ok) return ok;
  const std::string at = spec_file.string() + ": ";
  dom::object section;
  if (s.root["encoder"].get(section)) {
    return Error(ErrorCode::kParse,
                 at + "key \"encoder\" is missing or not an object (an encoder_only network "
                      "needs it: max_position_embeddings, position_offset, type_vocab_size, "
                      "post_norm, pooling)");
  }
  EncoderReader r(s, c);
  auto& e = spec.encoder;
  for (auto [key, target] : {std::pair{"max_position_embeddings", &e.max_position_embeddings},
                             std::pair{"position_offset", &e.position_offset},
                             std::pair{"type_vocab_size", &e.type_vocab_size}}) {
    auto v = r.integer(section, key);
    if (!v) return v.error();
    if (v->has_value()) *target = static_cast<int>(**v);
  }
  if (e.max_position_embeddings <= 0) {
    return Error(ErrorCode::kInvalidArgument,
                 at + "encoder.max_position_embeddings must be a positive integer");
  }
  if (auto post = section["post_norm"]; !post.error() && post.get(e.post_norm)) {
    return Error(ErrorCode::kParse, at + "key \"encoder.post_norm\" must be a boolean");
  }
  if (!e.post_norm) {
    return Error(ErrorCode::kUnsupported,
                 at + "encoder.post_norm false (pre-norm encoders) is not implemented");
  }
  if (auto pooling = section["pooling"]; !pooling.error()) {
    std::string_view p;
    if (pooling.get(p) || (p != "mean" && p != "cls")) {
      return Error(ErrorCode::kParse, at + "key \"encoder.pooling\" must be \"mean\" or \"cls\"");
    }
    e.pooling = p == "cls" ? model::Pooling::kCls : model::Pooling::kMean;
  }
  if (auto normalize = section["normalize"]; !normalize.error() && normalize.get(e.normalize)) {
    return Error(ErrorCode::kParse, at + "key \"encoder.normalize\" must be a boolean");
  }
  dom::object tensors;
  if (s.root["tensors"].get(tensors)) {
    return Error(ErrorCode::kParse, at + "key \"tensors\" is missing or not an object");
  }
  for (auto [key, target] : {std::pair{"position_embedding", &e.position_embedding},
                             std::pair{"token_type_embedding", &e.token_type_embedding},
                             std::pair{"embedding_norm", &e.embedding_norm}}) {
    auto field = tensors[key];
    if (field.error() == simdjson::NO_SUCH_FIELD) continue;
    std::string_view name;
    if (field.get(name)) {
      return Error(ErrorCode::kParse, at + "key \"tensors." + key + "\" must be a string");
    }
    *target = std::string(name);
  }
  if (e.position_embedding.empty()) {
    return Error(ErrorCode::kParse,
                 at + "key \"tensors.position_embedding\" is required for learned positions");
  }
  if (auto prefixes = tensors["prefixes"]; !prefixes.error()) {
    dom::array list;
    if (prefixes.get(list) || list.size() == 0) {
      return Error(ErrorCode::kParse,
                   at + "key \"tensors.prefixes\" must be a non-empty list of strings");
    }
    e.tensor_prefixes.clear();
    for (auto p : list) {
      std::string_view text;
      if (p.get(text))
        return Error(ErrorCode::kParse, at + "\"tensors.prefixes\" must hold strings");
      e.tensor_prefixes.emplace_back(text);
    }
  }
  return {};
}

Result<void> read_sentence_transformers_pooling(const std::filesystem::path& model_dir,
                                                model::EncoderSpec& encoder) {
  std::error_code ec;
  const auto pooling_file = model_dir / "1_Pooling" / "config.json";
  if (std::filesystem::exists(pooling_file, ec)) {
    Json doc;
    if (auto ok = parse(pooling_file, doc); !ok) return ok;
    auto on = [&](const char* key) {
      bool v = false;
      return !doc.root[key].get(v) && v;
    };
    if (on("pooling_mode_cls_token")) {
      encoder.pooling = model::Pooling::kCls;
    } else if (on("pooling_mode_mean_tokens")) {
      encoder.pooling = model::Pooling::kMean;
    } else {
      return Error(ErrorCode::kUnsupported,
                   pooling_file.string() +
                       ": no pooling mode Weft implements is on (pooling_mode_mean_tokens, "
                       "pooling_mode_cls_token); max, weighted mean and last-token pooling are "
                       "not implemented");
    }
  }
  const auto modules_file = model_dir / "modules.json";
  if (std::filesystem::exists(modules_file, ec)) {
    auto file = MappedFile::open(modules_file);
    if (!file) return file.error();
    dom::parser parser;
    simdjson::padded_string padded(file->text());
    dom::element root;
    if (auto err = parser.parse(padded).get(root); err || !root.is_array()) {
      return Error(ErrorCode::kParse, modules_file.string() + ": expected a JSON array of modules");
    }
    dom::array modules = root.get_array().value();
    for (auto m : modules) {
      std::string_view type;
      if (!m["type"].get(type) && type == "sentence_transformers.models.Normalize") {
        encoder.normalize = true;
      }
    }
  }
  return {};
}

}  // namespace weft
