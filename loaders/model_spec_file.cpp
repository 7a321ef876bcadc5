#include "loaders/model_spec_file.hpp"

#include <simdjson.h>

#include <algorithm>
#include <map>
#include <optional>

#include "loaders/mapped_file.hpp"
#include "loaders/model_spec_encoder.hpp"

namespace weft {
namespace {

namespace dom = simdjson::dom;
using model::ModelSpec;

struct JsonDoc {
  std::filesystem::path path;
  dom::parser parser;
  dom::element root;
};

Result<void> parse_json(const std::filesystem::path& path, JsonDoc& doc) {
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

std::string_view type_name(dom::element e) {
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
      if (!on) return std::optional<Value>();
    }
    for (auto name : fields) {
      if (auto found = config_field(name)) {
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

Result<void> read_rope(const SpecReader& r, dom::element pos, ModelSpec& s) {
  WEFT_TRY(order, r.resolve_key(pos, "rotation", "position_embedding.rotation"));
  if (order) {
    WEFT_TRY(text, r.convert<std::string>(*order, "a string"));
    WEFT_TRY(chosen, choose<model::RopeOrder>(r, "position_embedding.rotation", text,
                                              {{"half_split", model::RopeOrder::kHalfSplit},
                                               {"interleaved", model::RopeOrder::kInterleaved}}));
    s.rope.order = chosen;
  }
  WEFT_TRY(theta, r.resolve_key(pos, "theta", "position_embedding.theta"));
  WEFT_TRY(theta_value, r.required<double>(theta, "position_embedding.theta", "a number"));
  s.rope.theta = theta_value;
  WEFT_TRY(partial,
           r.resolve_key(pos, "partial_rotary_factor", "position_embedding.partial_rotary_factor"));
  if (partial) {
    WEFT_TRY(p, r.convert<double>(*partial, "a number"));
    s.rope.partial_rotary_factor = p;
  }
  WEFT_TRY(max_pos, r.resolve_key(pos, "max_position_embeddings",
                                  "position_embedding.max_position_embeddings"));
  if (max_pos) {
    WEFT_TRY(m, r.convert<std::int64_t>(*max_pos, "an integer"));
    s.rope.max_position_embeddings = static_cast<int>(m);
  }
  WEFT_TRY(scaling, r.resolve_key(pos, "scaling", "position_embedding.scaling"));
  if (!scaling) return {};
  dom::object obj;
  if (scaling->element.get(obj)) {
    return Error(ErrorCode::kInvalidArgument,
                 r.config_.path.string() + ": " + scaling->source + " is " +
                     std::string(type_name(scaling->element)) + ", expected an object");
  }
  // transformers spells the variant "rope_type" (older files: "type").
  std::string_view type = "default";
  if (obj["rope_type"].get(type) && obj["type"].get(type)) type = "default";
  auto number = [&](const char* key) -> Result<std::optional<double>> {
    dom::element e;
    if (obj[key].get(e) || e.is_null()) return std::optional<double>();
    if (!e.is_number()) {
      return Error(ErrorCode::kInvalidArgument,
                   r.config_.path.string() + ": " + scaling->source + " key \"" + key + "\" is " +
                       std::string(type_name(e)) + ", expected a number");
    }
    return std::optional<double>(e.get_double().value());
  };
  WEFT_TRY(factor, number("factor"));
  WEFT_TRY(original, number("original_max_position_embeddings"));
  const std::string type_text(type);
  WEFT_TRY(kind, choose<model::RopeScaling>(r, "rope scaling type", type_text,
                                            {{"default", model::RopeScaling::kDefault},
                                             {"linear", model::RopeScaling::kLinear},
                                             {"dynamic", model::RopeScaling::kDynamic},
                                             {"llama3", model::RopeScaling::kLlama3},
                                             {"yarn", model::RopeScaling::kYarn}}));
  s.rope.scaling = kind;
  s.rope.original_max_position_embeddings =
      static_cast<int>(original.value_or(s.rope.max_position_embeddings));
  if (kind != model::RopeScaling::kDefault) {
    if (!factor && !(kind == model::RopeScaling::kYarn && original)) {
      return Error(ErrorCode::kInvalidArgument, r.config_.path.string() + ": " + scaling->source +
                                                    " of type " + type_text + " needs \"factor\"");
    }
    // yarn without a factor: the ratio of the post- and pre-yarn context lengths.
    s.rope.factor = factor ? *factor
                           : static_cast<double>(s.rope.max_position_embeddings) /
                                 s.rope.original_max_position_embeddings;
  }
  for (auto [key, target] :
       {std::pair{"low_freq_factor", &s.rope.low_freq_factor},
        std::pair{"high_freq_factor", &s.rope.high_freq_factor},
        std::pair{"beta_fast", &s.rope.beta_fast}, std::pair{"beta_slow", &s.rope.beta_slow}}) {
    WEFT_TRY(value, number(key));
    if (value) *target = *value;
  }
  WEFT_TRY(attention_factor, number("attention_factor"));
  s.rope.attention_factor = attention_factor;
  WEFT_TRY(mscale, number("mscale"));
  s.rope.mscale = mscale;
  WEFT_TRY(mscale_all_dim, number("mscale_all_dim"));
  s.rope.mscale_all_dim = mscale_all_dim;
  bool truncate = true;
  if (!obj["truncate"].get(truncate)) s.rope.truncate = truncate;
  return {};
}

Result<int> hyperparameter(const SpecReader& r, dom::element hp, const std::string& key,
                           const std::map<std::string, int>& known) {
  WEFT_TRY(v, r.resolve_key(hp, key, "hyperparameters." + key));
  if (!v)
    return r.spec_error("hyperparameters." + key,
                        "has no value: config.json lacks its field and the spec gives no default");
  // A string default names other hyperparameters: "num_heads" or "hidden_size / num_heads".
  std::string_view text;
  if (!v->element.get(text) && v->source.find("spec default") != std::string::npos) {
    auto lookup = [&](std::string_view name) -> std::optional<int> {
      auto it = known.find(std::string(name));
      return it == known.end() ? std::nullopt : std::optional<int>(it->second);
    };
    const auto slash = text.find(" / ");
    const auto a = lookup(text.substr(0, slash));
    const auto b =
        slash == std::string_view::npos ? std::optional<int>(1) : lookup(text.substr(slash + 3));
    if (!a || !b || *b == 0) {
      return r.spec_error("hyperparameters." + key, "default \"" + std::string(text) +
                                                        "\" must name earlier hyperparameters");
    }
    return *a / *b;
  }
  WEFT_TRY(n, r.convert<std::int64_t>(*v, "an integer"));
  if (n < 0 || n > (1 << 30)) {
    return Error(ErrorCode::kInvalidArgument, r.config_.path.string() + ": " + v->source + " is " +
                                                  std::to_string(n) +
                                                  ", expected a positive integer");
  }
  return static_cast<int>(n);
}

Result<bool> flag(const SpecReader& r, dom::element parent, const std::string& key,
                  const std::string& path, bool fallback) {
  WEFT_TRY(v, r.resolve_key(parent, key, path));
  if (!v) return fallback;
  return r.convert<bool>(*v, "a boolean");
}

Result<dom::element> section(const SpecReader& r, const std::string& key) {
  dom::element e;
  if (r.spec_.root.get_object().value()[key].get(e) || !e.is_object()) {
    return r.spec_error(key, "is missing or not an object");
  }
  return e;
}

}  // namespace

Result<model::ModelSpec> read_model_spec(const std::filesystem::path& spec_file,
                                         const std::filesystem::path& config_json) {
  JsonDoc spec_doc, config_doc;
  if (auto ok = parse_json(spec_file, spec_doc); !ok) return ok.error();
  if (auto ok = parse_json(config_json, config_doc); !ok) return ok.error();
  SpecReader r(spec_doc, config_doc);
  ModelSpec s;
  dom::array archs;
  if (spec_doc.root["architectures"].get(archs) || archs.size() == 0) {
    return r.spec_error("architectures", "must be a non-empty list of names");
  }
  std::string_view first_arch;
  if (archs.at(0).get(first_arch)) return r.spec_error("architectures", "must hold strings");
  s.architecture = std::string(first_arch);

  WEFT_TRY(network, r.resolve_key(spec_doc.root, "network", "network"));
  if (network) {
    WEFT_TRY(text, r.convert<std::string>(*network, "a string"));
    WEFT_TRY(n, choose<model::Network>(r, "network", text,
                                       {{"decoder_only", model::Network::kDecoderOnly},
                                        {"encoder_only", model::Network::kEncoderOnly},
                                        {"encoder_decoder", model::Network::kEncoderDecoder}}));
    s.network = n;
  }

  WEFT_TRY(hp, section(r, "hyperparameters"));
  std::map<std::string, int> known;
  for (auto [key, target] :
       {std::pair{"vocab_size", &s.vocab_size}, std::pair{"hidden_size", &s.hidden_size},
        std::pair{"intermediate_size", &s.intermediate_size},
        std::pair{"num_layers", &s.num_layers}, std::pair{"num_heads", &s.num_heads},
        std::pair{"num_kv_heads", &s.num_kv_heads}, std::pair{"head_dim", &s.head_dim}}) {
    WEFT_TRY(value, hyperparameter(r, hp, key, known));
    *target = value;
    known[key] = value;
  }

  WEFT_TRY(norm, section(r, "normalization"));
  WEFT_TRY(norm_type, r.resolve_key(norm, "type", "normalization.type"));
  WEFT_TRY(norm_text, r.required<std::string>(norm_type, "normalization.type", "a string"));
  WEFT_TRY(norm_kind,
           choose<model::Norm>(r, "normalization.type", norm_text,
                               {{"rms", model::Norm::kRms}, {"layer", model::Norm::kLayer}}));
  s.norm = norm_kind;
  WEFT_TRY(eps, r.resolve_key(norm, "epsilon", "normalization.epsilon"));
  WEFT_TRY(eps_value, r.required<double>(eps, "normalization.epsilon", "a number"));
  s.norm_epsilon = eps_value;

  WEFT_TRY(act, r.resolve_key(spec_doc.root, "activation", "activation"));
  WEFT_TRY(act_text, r.required<std::string>(act, "activation", "a string"));
  WEFT_TRY(act_kind, choose<model::Activation>(r, "activation", act_text,
                                               {{"silu", model::Activation::kSilu},
                                                {"swish", model::Activation::kSilu},
                                                {"gelu", model::Activation::kGelu},
                                                {"gelu_pytorch_tanh", model::Activation::kGeluTanh},
                                                {"gelu_new", model::Activation::kGeluTanh},
                                                {"relu", model::Activation::kRelu}}));
  s.activation = act_kind;

  WEFT_TRY(mlp, section(r, "mlp"));
  WEFT_TRY(gated, flag(r, mlp, "gated", "mlp.gated", true));
  s.gated_mlp = gated;
  WEFT_TRY(mlp_bias, flag(r, mlp, "bias", "mlp.bias", false));
  s.mlp_bias = mlp_bias;

  WEFT_TRY(pos, section(r, "position_embedding"));
  WEFT_TRY(pos_type, r.resolve_key(pos, "type", "position_embedding.type"));
  WEFT_TRY(pos_text, r.required<std::string>(pos_type, "position_embedding.type", "a string"));
  WEFT_TRY(pos_kind,
           choose<model::PositionEmbedding>(r, "position_embedding.type", pos_text,
                                            {{"rope", model::PositionEmbedding::kRope},
                                             {"alibi", model::PositionEmbedding::kAlibi},
                                             {"learned", model::PositionEmbedding::kLearned},
                                             {"sinusoidal", model::PositionEmbedding::kSinusoidal},
                                             {"none", model::PositionEmbedding::kNone}}));
  s.position = pos_kind;
  if (s.position == model::PositionEmbedding::kRope) {
    if (auto ok = read_rope(r, pos, s); !ok) return ok.error();
  }

  WEFT_TRY(attn, section(r, "attention"));
  WEFT_TRY(qkv_bias, flag(r, attn, "qkv_bias", "attention.qkv_bias", false));
  s.qkv_bias = qkv_bias;
  WEFT_TRY(output_bias, flag(r, attn, "output_bias", "attention.output_bias", false));
  s.output_bias = output_bias;
  WEFT_TRY(window, r.resolve_key(attn, "sliding_window", "attention.sliding_window"));
  if (window) {
    WEFT_TRY(w, r.convert<std::int64_t>(*window, "an integer"));
    s.sliding_window = static_cast<int>(std::clamp<std::int64_t>(w, 0, 1 << 30));
  }
  WEFT_TRY(window_first, r.resolve_key(attn, "sliding_window_first_layer",
                                       "attention.sliding_window_first_layer"));
  if (window_first) {
    WEFT_TRY(w, r.convert<std::int64_t>(*window_first, "an integer"));
    s.sliding_window_first_layer = static_cast<int>(std::clamp<std::int64_t>(w, 0, 1 << 30));
  }
  WEFT_TRY(layout, r.resolve_key(attn, "qkv_layout", "attention.qkv_layout"));
  if (layout) {
    WEFT_TRY(text, r.convert<std::string>(*layout, "a string"));
    WEFT_TRY(l, choose<model::QkvLayout>(r, "attention.qkv_layout", text,
                                         {{"separate", model::QkvLayout::kSeparate},
                                          {"fused", model::QkvLayout::kFused}}));
    s.qkv_layout = l;
  }
  WEFT_TRY(tied, flag(r, spec_doc.root, "tied_embeddings", "tied_embeddings", false));
  s.tied_embeddings = tied;

  WEFT_TRY(tensors, section(r, "tensors"));
  auto& n = s.tensors;
  for (auto [key, target] :
       {std::pair{"embedding", &n.embedding}, std::pair{"final_norm", &n.final_norm},
        std::pair{"lm_head", &n.lm_head}, std::pair{"attn_norm", &n.attn_norm},
        std::pair{"mlp_norm", &n.mlp_norm}, std::pair{"q", &n.q}, std::pair{"k", &n.k},
        std::pair{"v", &n.v}, std::pair{"qkv", &n.qkv}, std::pair{"o", &n.o},
        std::pair{"gate", &n.gate}, std::pair{"up", &n.up}, std::pair{"gate_up", &n.gate_up},
        std::pair{"down", &n.down}}) {
    std::string_view name;
    auto field = tensors.get_object().value()[key];
    if (field.error() == simdjson::NO_SUCH_FIELD) continue;
    if (field.get(name)) return r.spec_error(std::string("tensors.") + key, "must be a string");
    *target = std::string(name);
  }
  if (s.network == model::Network::kEncoderOnly) {
    if (auto ok = read_encoder_spec(spec_file, config_json, s); !ok) return ok.error();
  }
  if (auto problem = model::validate(s)) {
    return Error(ErrorCode::kInvalidArgument, config_json.string() + " with spec " +
                                                  spec_file.filename().string() + ": " + *problem);
  }
  return s;
}

namespace {

// (architecture, spec file) for every spec file in `spec_dir`, sorted by architecture. Files
// that do not parse or name no architectures are skipped: they cannot match anything.
std::vector<std::pair<std::string, std::filesystem::path>> spec_index(
    const std::filesystem::path& spec_dir) {
  std::vector<std::pair<std::string, std::filesystem::path>> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(spec_dir, ec)) {
    if (entry.path().extension() != ".json") continue;
    JsonDoc doc;
    if (!parse_json(entry.path(), doc)) continue;
    dom::array archs;
    if (doc.root["architectures"].get(archs)) continue;
    for (auto a : archs) {
      std::string_view name;
      if (!a.get(name)) out.emplace_back(std::string(name), entry.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<std::string> known_architectures(const std::filesystem::path& spec_dir) {
  std::vector<std::string> out;
  for (auto& [name, path] : spec_index(spec_dir))
    out.push_back(name);
  return out;
}

Result<std::filesystem::path> find_spec_file(const std::filesystem::path& spec_dir,
                                             const std::filesystem::path& config_json) {
  JsonDoc config;
  if (auto ok = parse_json(config_json, config); !ok) return ok.error();
  dom::array wanted;
  if (config.root["architectures"].get(wanted) || wanted.size() == 0) {
    return Error(ErrorCode::kInvalidArgument,
                 config_json.string() +
                     ": field \"architectures\" is missing or not a non-empty "
                     "list of names; pass --spec FILE to choose a spec");
  }
  const auto index = spec_index(spec_dir);
  std::string names;
  for (auto w : wanted) {
    std::string_view arch;
    if (w.get(arch)) {
      return Error(ErrorCode::kInvalidArgument,
                   config_json.string() + ": field \"architectures\" must hold strings");
    }
    names += (names.empty() ? "" : ", ") + std::string(arch);
    for (const auto& [name, path] : index) {
      if (name == arch) return path;
    }
  }
  std::string known;
  for (const auto& entry : index)
    known += (known.empty() ? "" : ", ") + entry.first;
  return Error(
      ErrorCode::kUnsupported,
      config_json.string() + ": unknown architecture " + names + " (known: " +
          (known.empty() ? std::string("none; no spec files in ") + spec_dir.string() : known) +
          "). If the model combines known blocks, add a spec file for it to " + spec_dir.string() +
          " (format: docs/model-spec.md) or pass --spec FILE");
}

namespace {

// Reads eos/bos/pad from one file into the fields of `out` that are still unset.
Result<void> read_token_ids(const std::filesystem::path& path, model::GenerationDefaults& out) {
  JsonDoc doc;
  if (auto ok = parse_json(path, doc); !ok) return ok.error();
  auto id_of = [&](const char* key, dom::element e) -> Result<int> {
    std::int64_t id = 0;
    if (e.get(id) || id < 0 || id > (1 << 30)) {
      return Error(ErrorCode::kInvalidArgument, path.string() + ": field \"" + key + "\" is " +
                                                    std::string(type_name(e)) +
                                                    ", expected a token id or a list of them");
    }
    return static_cast<int>(id);
  };
  dom::element eos;
  if (out.eos_token_ids.empty() && !doc.root["eos_token_id"].get(eos) && !eos.is_null()) {
    if (eos.is_array()) {
      dom::array ids = eos.get_array().value();
      for (auto e : ids) {
        WEFT_TRY(id, id_of("eos_token_id", e));
        out.eos_token_ids.push_back(id);
      }
    } else {
      WEFT_TRY(id, id_of("eos_token_id", eos));
      out.eos_token_ids.push_back(id);
    }
  }
  for (auto [key, target] : {std::pair{"bos_token_id", &out.bos_token_id},
                             std::pair{"pad_token_id", &out.pad_token_id}}) {
    dom::element e;
    if (target->has_value() || doc.root[key].get(e) || e.is_null()) continue;
    WEFT_TRY(id, id_of(key, e));
    *target = id;
  }
  return {};
}

}  // namespace

// generation_config.json first; what it leaves unset comes from config.json. (transformers
// only falls back to config.json when generation_config.json is absent; a file that exists
// but names no eos would otherwise make generation run to --max-tokens.)
Result<model::GenerationDefaults> read_generation_defaults(const std::filesystem::path& model_dir) {
  model::GenerationDefaults out;
  std::error_code ec;
  for (const auto* name : {"generation_config.json", "config.json"}) {
    const auto path = model_dir / name;
    if (!std::filesystem::exists(path, ec)) continue;
    if (auto ok = read_token_ids(path, out); !ok) return ok.error();
  }
  return out;
}

}  // namespace weft
