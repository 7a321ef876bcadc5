// The spec keys of the blocks the model zoo needed (docs/model-spec.md, "Model zoo blocks"):
// GPT-2's Conv1D weights and learned positions, OPT's position offset and post-norm variant,
// Gemma's (1 + w) norm and embedding scale, Falcon's parallel attention and MLP, Phi-3's
// longrope scaling.

#include <algorithm>
#include <cmath>
#include <string>

#include "loaders/model_spec_reader.hpp"

namespace weft::spec_reader {
namespace {

Result<std::optional<Value>> optional_key(const SpecReader& r, dom::element parent,
                                          const std::string& key, const std::string& path) {
  dom::object obj;
  if (parent.get(obj)) return std::optional<Value>();
  return r.resolve_key(parent, key, path);
}

Result<std::vector<double>> number_list(const SpecReader& r, dom::object obj, const char* key,
                                        const std::string& source) {
  dom::array list;
  std::vector<double> out;
  if (obj[key].get(list)) {
    return Error(ErrorCode::kInvalidArgument, r.config_.path.string() + ": " + source +
                                                  " of type longrope needs \"" + key +
                                                  "\", a list of numbers");
  }
  for (auto e : list) {
    if (!e.is_number()) {
      return Error(ErrorCode::kInvalidArgument,
                   r.config_.path.string() + ": " + source + " key \"" + key + "\" holds " +
                       std::string(type_name(e)) + ", expected numbers");
    }
    out.push_back(e.get_double().value());
  }
  return out;
}

}  // namespace

Result<void> read_zoo_blocks(const SpecReader& r, dom::element root, model::ModelSpec& s) {
  dom::element norm;
  if (!root["normalization"].get(norm)) {
    WEFT_TRY(placement, optional_key(r, norm, "placement", "normalization.placement"));
    if (placement) {
      WEFT_TRY(text, r.convert<std::string>(*placement, "a string"));
      WEFT_TRY(p, choose<model::NormPlacement>(r, "normalization.placement", text,
                                               {{"pre", model::NormPlacement::kPre},
                                                {"post", model::NormPlacement::kPost}}));
      s.norm_placement = p;
    }
    WEFT_TRY(offset, optional_key(r, norm, "weight_offset", "normalization.weight_offset"));
    if (offset) {
      WEFT_TRY(v, r.convert<double>(*offset, "a number"));
      s.norm_weight_offset = v;
    }
  }

  WEFT_TRY(scale, r.resolve_key(root, "embedding_scale", "embedding_scale"));
  if (scale) {
    std::string_view text;
    if (!scale->element.get(text)) {
      if (text != "sqrt_hidden_size") {
        return r.spec_error("embedding_scale", "is \"" + std::string(text) +
                                                   "\", expected a number or \"sqrt_hidden_size\"");
      }
      s.embedding_scale = std::sqrt(static_cast<double>(s.hidden_size));
    } else {
      WEFT_TRY(v, r.convert<double>(*scale, "a number or \"sqrt_hidden_size\""));
      s.embedding_scale = v;
    }
  }

  dom::element pos;
  // (An encoder-only spec gives its learned positions in its "encoder" section.)
  if (s.position == model::PositionEmbedding::kLearned &&
      s.network != model::Network::kEncoderOnly && !root["position_embedding"].get(pos)) {
    WEFT_TRY(max_pos, optional_key(r, pos, "max_position_embeddings",
                                   "position_embedding.max_position_embeddings"));
    WEFT_TRY(m, r.required<std::int64_t>(max_pos, "position_embedding.max_position_embeddings",
                                         "an integer"));
    if (m <= 0 || m > (1 << 26)) {
      return r.spec_error("position_embedding.max_position_embeddings",
                          "resolves to " + std::to_string(m) + ", expected a positive integer");
    }
    s.max_positions = static_cast<int>(m);
    WEFT_TRY(offset, optional_key(r, pos, "offset", "position_embedding.offset"));
    if (offset) {
      WEFT_TRY(o, r.convert<std::int64_t>(*offset, "an integer"));
      if (o < 0 || o > 1024) {
        return r.spec_error("position_embedding.offset",
                            "is " + std::to_string(o) + ", expected 0 to 1024");
      }
      s.position_offset = static_cast<int>(o);
    }
  }

  WEFT_TRY(parallel, r.resolve_key(root, "parallel_attention", "parallel_attention"));
  if (parallel) {
    WEFT_TRY(v, r.convert<bool>(*parallel, "a boolean"));
    s.parallel_attention = v;
  }
  WEFT_TRY(layout, r.resolve_key(root, "linear_layout", "linear_layout"));
  if (layout) {
    WEFT_TRY(text, r.convert<std::string>(*layout, "a string"));
    WEFT_TRY(l, choose<model::LinearLayout>(r, "linear_layout", text,
                                            {{"out_in", model::LinearLayout::kOutIn},
                                             {"in_out", model::LinearLayout::kInOut}}));
    s.linear_layout = l;
  }
  // "requires": {"config_field": allowed value or list of them}: a config.json value the
  // spec's blocks do not implement is refused rather than run with wrong numbers. An absent
  // or null field passes.
  dom::object requires_obj;
  if (!root["requires"].get(requires_obj)) {
    for (auto [field, allowed] : requires_obj) {
      auto found = r.config_field(field);
      if (!found) continue;
      const std::string have = simdjson::minify(*found);
      std::string listed;
      bool ok = false;
      auto consider = [&](dom::element e) {
        const std::string text = simdjson::minify(e);
        ok = ok || text == have;
        listed += (listed.empty() ? "" : ", ") + text;
      };
      dom::array choices;
      if (!allowed.get(choices)) {
        for (auto e : choices)
          consider(e);
      } else {
        consider(allowed);
      }
      if (!ok) {
        return Error(ErrorCode::kUnsupported,
                     r.config_.path.string() + ": field \"" + std::string(field) + "\" is " + have +
                         ", which the spec " + r.spec_.path.filename().string() +
                         " does not implement (supported: " + listed + ")");
      }
    }
  }
  if (!s.parallel_attention && s.tensors.mlp_norm.empty()) {
    return r.spec_error("tensors.mlp_norm",
                        "is empty, which only a parallel_attention model (the MLP reading the "
                        "attention norm's output) may leave it");
  }
  return {};
}

Result<void> read_longrope(const SpecReader& r, dom::element pos, dom::object scaling,
                           const std::string& source, std::optional<double> factor,
                           std::optional<double> original, model::ModelSpec& s) {
  // transformers: a config.json original_max_position_embeddings (Phi-3 keeps it at the top
  // level) wins, and the factor is then max_position_embeddings over it.
  WEFT_TRY(top, optional_key(r, pos, "original_max_position_embeddings",
                             "position_embedding.original_max_position_embeddings"));
  if (top) {
    WEFT_TRY(o, r.convert<std::int64_t>(*top, "an integer"));
    if (o <= 0) {
      return Error(ErrorCode::kInvalidArgument, r.config_.path.string() + ": " + top->source +
                                                    " is " + std::to_string(o) +
                                                    ", expected a positive integer");
    }
    s.rope.original_max_position_embeddings = static_cast<int>(o);
    s.rope.factor = static_cast<double>(s.rope.max_position_embeddings) / static_cast<double>(o);
  } else {
    s.rope.original_max_position_embeddings =
        static_cast<int>(original.value_or(s.rope.max_position_embeddings));
    // Without a factor, the ratio transformers would compute from the two context lengths.
    s.rope.factor = factor.value_or(static_cast<double>(s.rope.max_position_embeddings) /
                                    std::max(1, s.rope.original_max_position_embeddings));
  }
  WEFT_TRY(short_factor, number_list(r, scaling, "short_factor", source));
  WEFT_TRY(long_factor, number_list(r, scaling, "long_factor", source));
  s.rope.short_factor = std::move(short_factor);
  s.rope.long_factor = std::move(long_factor);
  if (s.rope.original_max_position_embeddings <= 0) {
    return Error(ErrorCode::kInvalidArgument,
                 r.config_.path.string() + ": " + source +
                     " of type longrope needs original_max_position_embeddings (or "
                     "max_position_embeddings)");
  }
  return {};
}

}  // namespace weft::spec_reader
