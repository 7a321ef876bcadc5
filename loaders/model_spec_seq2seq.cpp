// The spec keys of encoder-decoder networks (docs/model-spec.md, "Encoder-decoder networks"):
// the "encoder_decoder" section (the encoder's size, T5's relative buckets, M2M100's sinusoidal
// padding index, the attention and lm-head scales, the decoder's start token) and the "encoder"
// and "cross_attention" objects of "tensors".

#include <cmath>
#include <string>

#include "loaders/model_spec_reader.hpp"

namespace weft::spec_reader {
namespace {

Result<std::optional<std::int64_t>> integer(const SpecReader& r, dom::element section,
                                            const std::string& key, std::int64_t low,
                                            std::int64_t high) {
  const std::string path = "encoder_decoder." + key;
  WEFT_TRY(v, r.resolve_key(section, key, path));
  if (!v) return std::optional<std::int64_t>();
  WEFT_TRY(n, r.convert<std::int64_t>(*v, "an integer"));
  if (n < low || n > high) {
    return Error(
        ErrorCode::kInvalidArgument,
        (v->source.rfind("config.json", 0) == 0 ? r.config_.path.string() : r.spec_.path.string()) +
            ": " + v->source + " (spec key \"" + path + "\") is " + std::to_string(n) +
            ", expected " + std::to_string(low) + " to " + std::to_string(high));
  }
  return std::optional<std::int64_t>(n);
}

// A scale: a positive number, "inverse_sqrt_hidden_size", or "inverse_sqrt_head_dim" (0: each
// stack's own head_dim).
Result<std::optional<double>> scale(const SpecReader& r, dom::element section,
                                    const std::string& key, double hidden) {
  const std::string path = "encoder_decoder." + key;
  WEFT_TRY(v, r.resolve_key(section, key, path));
  if (!v) return std::optional<double>();
  std::string_view text;
  if (!v->element.get(text)) {
    if (text == "inverse_sqrt_hidden_size") return std::optional<double>(1.0 / std::sqrt(hidden));
    // Per stack (the encoder's and decoder's head_dim may differ): 0 stands for it.
    if (text == "inverse_sqrt_head_dim") return std::optional<double>(0.0);
    return r.spec_error(path, "is \"" + std::string(text) +
                                  "\", expected a number, \"inverse_sqrt_hidden_size\" or "
                                  "\"inverse_sqrt_head_dim\"");
  }
  WEFT_TRY(d, r.convert<double>(*v, "a number"));
  if (!(d > 0) || !std::isfinite(d)) return r.spec_error(path, "must be a positive number");
  return std::optional<double>(d);
}

Result<void> names(const SpecReader& r, dom::element tensors, const char* object,
                   std::initializer_list<std::pair<const char*, std::string*>> keys,
                   bool required) {
  dom::element sub;
  if (tensors.get_object().value()[object].get(sub) || !sub.is_object()) {
    if (!required) return {};
    return r.spec_error(std::string("tensors.") + object,
                        "is missing or not an object (an encoder_decoder network needs it)");
  }
  for (auto [key, target] : keys) {
    const std::string path = std::string("tensors.") + object + "." + key;
    WEFT_TRY(name, r.resolve_key(sub, key, path));
    if (!name) continue;
    WEFT_TRY(text, r.convert<std::string>(*name, "a tensor name"));
    *target = text;
  }
  return {};
}

}  // namespace

Result<void> read_seq2seq_blocks(const SpecReader& r, dom::element root, model::ModelSpec& s) {
  auto& e = s.seq2seq;
  dom::element section;
  if (root.get_object().value()["encoder_decoder"].get(section) || !section.is_object()) {
    return r.spec_error("encoder_decoder",
                        "is missing or not an object (an encoder_decoder network needs it: "
                        "encoder_layers, encoder_heads, encoder_intermediate_size, ...)");
  }
  constexpr std::int64_t kMax = 1 << 20;
  for (auto [key, target, low, fallback] :
       {std::tuple{"encoder_layers", &e.encoder_layers, 1, s.num_layers},
        std::tuple{"encoder_heads", &e.encoder_heads, 1, s.num_heads},
        std::tuple{"encoder_intermediate_size", &e.encoder_intermediate_size, 1,
                   s.intermediate_size},
        std::tuple{"relative_attention_num_buckets", &e.relative_buckets, 2, 32},
        std::tuple{"relative_attention_max_distance", &e.relative_max_distance, 2, 128},
        std::tuple{"position_padding_idx", &e.position_padding_idx, 0, 1},
        std::tuple{"decoder_start_token_id", &e.decoder_start_token_id, 0, 0}}) {
    WEFT_TRY(v, integer(r, section, key, low, kMax));
    *target = v ? static_cast<int>(*v) : fallback;
  }
  if (e.encoder_heads <= 0 || e.encoder_layers <= 0 || e.encoder_intermediate_size <= 0) {
    return r.spec_error("encoder_decoder",
                        "resolves to an encoder without layers, heads or MLP width (from the "
                        "decoder's, which config.json leaves at 0)");
  }
  // The encoder's head_dim: explicit (T5's d_kv), else hidden / encoder heads.
  WEFT_TRY(head_dim, integer(r, section, "encoder_head_dim", 1, kMax));
  e.encoder_head_dim = head_dim ? static_cast<int>(*head_dim) : s.hidden_size / e.encoder_heads;
  WEFT_TRY(attention, scale(r, section, "attention_scale", s.hidden_size));
  e.attention_scale = attention.value_or(0.0);
  WEFT_TRY(lm_head, scale(r, section, "lm_head_scale", s.hidden_size));
  if (lm_head && *lm_head == 0.0) {
    return r.spec_error("encoder_decoder.lm_head_scale",
                        "is \"inverse_sqrt_head_dim\", which only attention_scale takes");
  }
  e.lm_head_scale = lm_head.value_or(1.0);
  if (e.relative_buckets % 2 != 0 && s.position == model::PositionEmbedding::kRelativeBuckets) {
    return r.spec_error("encoder_decoder.relative_attention_num_buckets",
                        "must be even (the encoder splits the buckets between both directions)");
  }
  if (s.position != model::PositionEmbedding::kRelativeBuckets &&
      s.position != model::PositionEmbedding::kSinusoidal) {
    return r.spec_error("position_embedding.type",
                        "must be \"relative_buckets\" (T5) or \"sinusoidal\" (M2M100) for an "
                        "encoder_decoder network; other position blocks are not implemented "
                        "for it");
  }

  dom::element tensors;
  if (root.get_object().value()["tensors"].get(tensors) || !tensors.is_object()) {
    return r.spec_error("tensors", "is missing or not an object");
  }
  if (auto ok = names(r, tensors, "encoder",
                      {{"attn_norm", &e.encoder_attn_norm},
                       {"q", &e.encoder_q},
                       {"k", &e.encoder_k},
                       {"v", &e.encoder_v},
                       {"o", &e.encoder_o},
                       {"mlp_norm", &e.encoder_mlp_norm},
                       {"gate", &e.encoder_gate},
                       {"up", &e.encoder_up},
                       {"down", &e.encoder_down},
                       {"final_norm", &e.encoder_final_norm},
                       {"relative_attention_bias", &e.encoder_relative_bias}},
                      true);
      !ok) {
    return ok.error();
  }
  if (auto ok = names(r, tensors, "cross_attention",
                      {{"norm", &e.cross_norm},
                       {"q", &e.cross_q},
                       {"k", &e.cross_k},
                       {"v", &e.cross_v},
                       {"o", &e.cross_o}},
                      true);
      !ok) {
    return ok.error();
  }
  WEFT_TRY(decoder_bias,
           r.resolve_key(tensors, "relative_attention_bias", "tensors.relative_attention_bias"));
  if (decoder_bias) {
    WEFT_TRY(text, r.convert<std::string>(*decoder_bias, "a tensor name"));
    e.decoder_relative_bias = text;
  }
  dom::array fallbacks;
  if (!tensors.get_object().value()["embedding_fallbacks"].get(fallbacks)) {
    for (auto f : fallbacks) {
      std::string_view name;
      if (f.get(name)) return r.spec_error("tensors.embedding_fallbacks", "must hold strings");
      e.embedding_fallbacks.emplace_back(name);
    }
  }
  // Every tensor the forward pass reads must be named.
  for (auto [key, value] :
       {std::pair{"tensors.encoder.attn_norm", &e.encoder_attn_norm},
        std::pair{"tensors.encoder.q", &e.encoder_q}, std::pair{"tensors.encoder.k", &e.encoder_k},
        std::pair{"tensors.encoder.v", &e.encoder_v}, std::pair{"tensors.encoder.o", &e.encoder_o},
        std::pair{"tensors.encoder.mlp_norm", &e.encoder_mlp_norm},
        std::pair{"tensors.encoder.up", &e.encoder_up},
        std::pair{"tensors.encoder.down", &e.encoder_down},
        std::pair{"tensors.encoder.final_norm", &e.encoder_final_norm},
        std::pair{"tensors.cross_attention.norm", &e.cross_norm},
        std::pair{"tensors.cross_attention.q", &e.cross_q},
        std::pair{"tensors.cross_attention.k", &e.cross_k},
        std::pair{"tensors.cross_attention.v", &e.cross_v},
        std::pair{"tensors.cross_attention.o", &e.cross_o}}) {
    if (value->empty()) return r.spec_error(key, "is required for an encoder_decoder network");
  }
  if (s.gated_mlp && e.encoder_gate.empty()) {
    return r.spec_error("tensors.encoder.gate", "is required with a gated MLP");
  }
  if (s.position == model::PositionEmbedding::kRelativeBuckets &&
      (e.encoder_relative_bias.empty() || e.decoder_relative_bias.empty())) {
    return r.spec_error("tensors.relative_attention_bias",
                        "and tensors.encoder.relative_attention_bias are required with "
                        "relative_buckets positions");
  }
  return {};
}

}  // namespace weft::spec_reader
