#include "loaders/model_spec_file.hpp"

#include <simdjson.h>

#include <algorithm>
#include <map>
#include <optional>

#include "loaders/mapped_file.hpp"
#include "loaders/model_spec_encoder.hpp"
#include "loaders/model_spec_reader.hpp"

namespace weft {
namespace {

using namespace spec_reader;  // NOLINT(google-build-using-namespace)
namespace dom = simdjson::dom;
using model::ModelSpec;

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
                                             {"yarn", model::RopeScaling::kYarn},
                                             {"longrope", model::RopeScaling::kLongrope},
                                             {"su", model::RopeScaling::kLongrope}}));
  s.rope.scaling = kind;
  s.rope.original_max_position_embeddings =
      static_cast<int>(original.value_or(s.rope.max_position_embeddings));
  if (kind == model::RopeScaling::kLongrope) {
    if (auto ok = read_longrope(r, pos, obj, scaling->source, factor, original, s); !ok) {
      return ok.error();
    }
  } else if (kind != model::RopeScaling::kDefault) {
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
  // A string default names other hyperparameters: "num_heads", "hidden_size / num_heads" or
  // "4 * hidden_size" (an operand may be an integer literal).
  std::string_view text;
  const bool from_spec = v->source.rfind("config.json", 0) != 0 ||
                         v->source.find("spec default") != std::string::npos ||
                         v->source.find("spec map") != std::string::npos;
  if (!v->element.get(text) && from_spec) {
    auto lookup = [&](std::string_view name) -> std::optional<int> {
      if (!name.empty() &&
          std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
          name.size() < 9) {
        return std::stoi(std::string(name));
      }
      auto it = known.find(std::string(name));
      return it == known.end() ? std::nullopt : std::optional<int>(it->second);
    };
    auto op = text.find(" / ");
    const bool multiply = op == std::string_view::npos && text.find(" * ") != text.npos;
    if (multiply) op = text.find(" * ");
    const auto a = lookup(text.substr(0, op));
    const auto b =
        op == std::string_view::npos ? std::optional<int>(1) : lookup(text.substr(op + 3));
    if (!a || !b || *b == 0) {
      return r.spec_error("hyperparameters." + key, "default \"" + std::string(text) +
                                                        "\" must name earlier hyperparameters");
    }
    return multiply ? *a * *b : *a / *b;
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
  WEFT_TRY(pos_kind, choose<model::PositionEmbedding>(
                         r, "position_embedding.type", pos_text,
                         {{"rope", model::PositionEmbedding::kRope},
                          {"alibi", model::PositionEmbedding::kAlibi},
                          {"learned", model::PositionEmbedding::kLearned},
                          {"sinusoidal", model::PositionEmbedding::kSinusoidal},
                          {"none", model::PositionEmbedding::kNone},
                          {"relative_buckets", model::PositionEmbedding::kRelativeBuckets}}));
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
                                          {"fused", model::QkvLayout::kFused},
                                          {"grouped", model::QkvLayout::kGrouped}}));
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
        std::pair{"down", &n.down}, std::pair{"position_embedding", &n.position_embedding},
        std::pair{"embedding_norm", &n.embedding_norm}}) {
    // A tensor name is a string, or a field reference ({"field": ..., "map": ...}) that picks
    // one by a config.json value; "" means the block has no such tensor.
    const std::string path = std::string("tensors.") + key;
    WEFT_TRY(name, r.resolve_key(tensors, key, path));
    if (!name) continue;
    WEFT_TRY(text, r.convert<std::string>(*name, "a tensor name"));
    *target = text;
  }
  if (s.network == model::Network::kEncoderOnly) {
    if (auto ok = read_encoder_spec(spec_file, config_json, s); !ok) return ok.error();
  }
  if (auto ok = read_zoo_blocks(r, spec_doc.root, s); !ok) return ok.error();
  if (s.network == model::Network::kEncoderDecoder) {
    if (auto ok = read_seq2seq_blocks(r, spec_doc.root, s); !ok) return ok.error();
  }
  if (auto problem = model::validate(s)) {
    return Error(ErrorCode::kInvalidArgument, config_json.string() + " with spec " +
                                                  spec_file.filename().string() + ": " + *problem);
  }
  return s;
}

namespace {

// (name, spec file) for every spec file in `spec_dir`, sorted by name: the names in its `key`
// list ("architectures" or "model_types"). Files that do not parse are skipped: they cannot
// match anything.
std::vector<std::pair<std::string, std::filesystem::path>> spec_index(
    const std::filesystem::path& spec_dir, const char* key = "architectures") {
  std::vector<std::pair<std::string, std::filesystem::path>> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(spec_dir, ec)) {
    if (entry.path().extension() != ".json") continue;
    JsonDoc doc;
    if (!parse_json(entry.path(), doc)) continue;
    dom::array names;
    if (doc.root[key].get(names)) continue;
    for (auto a : names) {
      std::string_view name;
      if (!a.get(name)) out.emplace_back(std::string(name), entry.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string joined(const std::vector<std::pair<std::string, std::filesystem::path>>& index) {
  std::string out;
  for (const auto& entry : index)
    out += (out.empty() ? "" : ", ") + entry.first;
  return out.empty() ? "none" : out;
}

}  // namespace

std::vector<std::string> known_architectures(const std::filesystem::path& spec_dir) {
  std::vector<std::string> out;
  for (auto& [name, path] : spec_index(spec_dir))
    out.push_back(name);
  return out;
}

SpecIndex read_spec_index(const std::filesystem::path& spec_dir) {
  return SpecIndex{spec_dir, spec_index(spec_dir), spec_index(spec_dir, "model_types")};
}

// config.json's "architectures" first (exact class names), then its "model_type" (the family,
// which a config without architectures, or with a head class no spec lists, still names).
Result<std::filesystem::path> find_spec_file(const std::filesystem::path& spec_dir,
                                             const std::filesystem::path& config_json) {
  return find_spec_file(read_spec_index(spec_dir), config_json);
}

Result<std::filesystem::path> find_spec_file(const SpecIndex& specs,
                                             const std::filesystem::path& config_json) {
  JsonDoc config;
  if (auto ok = parse_json(config_json, config); !ok) return ok.error();
  const auto& index = specs.architectures;
  const auto& spec_dir = specs.dir;
  std::string names;
  dom::element archs;
  if (!config.root["architectures"].get(archs) && !archs.is_null()) {
    dom::array wanted;
    if (archs.get(wanted)) {
      return Error(ErrorCode::kInvalidArgument,
                   config_json.string() + ": field \"architectures\" is " +
                       std::string(type_name(archs)) + ", expected a list of names");
    }
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
  }
  const auto& types = specs.model_types;
  std::string_view model_type;
  dom::element type_node;
  const bool has_type = !config.root["model_type"].get(type_node) && !type_node.get(model_type);
  if (has_type) {
    for (const auto& [name, path] : types) {
      if (name == model_type) return path;
    }
  }
  const std::string asked =
      (names.empty() ? std::string("field \"architectures\" is absent")
                     : "field \"architectures\" names " + names) +
      (has_type ? " and field \"model_type\" is \"" + std::string(model_type) + "\""
                : std::string(" and field \"model_type\" is absent"));
  return Error(ErrorCode::kUnsupported,
               config_json.string() + ": unknown architecture: " + asked +
                   "; supported architectures: " + joined(index) +
                   "; supported model_type values: " + joined(types) +
                   (index.empty() ? " (no spec files in " + spec_dir.string() + ")" : "") +
                   ". If the model combines known blocks, add a spec file for it to " +
                   spec_dir.string() + " (format: docs/model-spec.md) or pass --spec FILE");
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
