#include "runtime/model/rope_frequencies.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace weft::model {
namespace {

// base^(-2i/dim) in fp32, as torch computes it from an fp32 arange.
std::vector<float> default_inv_freq(double base, int dim) {
  std::vector<float> out(static_cast<std::size_t>(dim / 2));
  for (int i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    out[static_cast<std::size_t>(i)] = 1.0f / std::pow(static_cast<float>(base), exponent);
  }
  return out;
}

double yarn_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// YaRN (Peng et al. 2023): interpolate low frequencies, keep high ones, ramp between.
RopeFrequencies yarn(const RopeSpec& rope, int dim) {
  const double base = rope.theta;
  const double factor = rope.factor;
  const double original = rope.original_max_position_embeddings;
  RopeFrequencies out;
  if (rope.attention_factor) {
    out.attention_factor = static_cast<float>(*rope.attention_factor);
  } else if (rope.mscale && rope.mscale_all_dim && *rope.mscale != 0.0 &&
             *rope.mscale_all_dim != 0.0) {
    out.attention_factor = static_cast<float>(yarn_mscale(factor, *rope.mscale) /
                                              yarn_mscale(factor, *rope.mscale_all_dim));
  } else {
    out.attention_factor = static_cast<float>(yarn_mscale(factor, 1.0));
  }
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(original / (rotations * 2.0 * std::numbers::pi))) /
           (2.0 * std::log(base));
  };
  double low = correction_dim(rope.beta_fast);
  double high = correction_dim(rope.beta_slow);
  if (rope.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // as transformers does, to avoid dividing by zero
  const auto extrapolation = default_inv_freq(base, dim);
  out.inv_freq.resize(extrapolation.size());
  for (std::size_t i = 0; i < extrapolation.size(); ++i) {
    const float ramp =
        std::clamp(static_cast<float>((static_cast<double>(i) - low) / (high - low)), 0.0f, 1.0f);
    const float extrapolation_weight = 1.0f - ramp;
    const float interpolation = extrapolation[i] / static_cast<float>(factor);
    out.inv_freq[i] =
        interpolation * (1.0f - extrapolation_weight) + extrapolation[i] * extrapolation_weight;
  }
  return out;
}

}  // namespace

RopeFrequencies rope_frequencies(const RopeSpec& rope, int rotary_dim, int seq_len) {
  RopeFrequencies out;
  switch (rope.scaling) {
    case RopeScaling::kDefault:
      out.inv_freq = default_inv_freq(rope.theta, rotary_dim);
      break;
    case RopeScaling::kLinear:
      out.inv_freq = default_inv_freq(rope.theta, rotary_dim);
      for (auto& f : out.inv_freq)
        f /= static_cast<float>(rope.factor);
      break;
    case RopeScaling::kDynamic: {
      // NTK-aware scaling grows the base once the sequence outgrows the trained length.
      double base = rope.theta;
      const double max_pos = rope.max_position_embeddings;
      if (seq_len > rope.max_position_embeddings) {
        base *= std::pow(rope.factor * seq_len / max_pos - (rope.factor - 1.0),
                         static_cast<double>(rotary_dim) / (rotary_dim - 2));
      }
      out.inv_freq = default_inv_freq(base, rotary_dim);
      break;
    }
    case RopeScaling::kLlama3: {
      out.inv_freq = default_inv_freq(rope.theta, rotary_dim);
      const double old_context = rope.original_max_position_embeddings;
      const double low_wavelen = old_context / rope.low_freq_factor;
      const double high_wavelen = old_context / rope.high_freq_factor;
      for (auto& f : out.inv_freq) {
        const double wavelen = 2.0 * std::numbers::pi / f;
        if (wavelen > low_wavelen) {
          f = static_cast<float>(f / rope.factor);
        } else if (wavelen >= high_wavelen) {
          const double smooth = (old_context / wavelen - rope.low_freq_factor) /
                                (rope.high_freq_factor - rope.low_freq_factor);
          f = static_cast<float>((1.0 - smooth) * f / rope.factor + smooth * f);
        }
      }
      break;
    }
    case RopeScaling::kYarn:
      return yarn(rope, rotary_dim);
    case RopeScaling::kLongrope: {
      // LongRoPE (Ding et al. 2024; Phi-3's "su"): searched per-frequency divisors, the long
      // set once the sequence outgrows the original context, as transformers'
      // longrope_frequency_update switches them per step.
      const auto& ext =
          seq_len > rope.original_max_position_embeddings ? rope.long_factor : rope.short_factor;
      out.inv_freq.resize(static_cast<std::size_t>(rotary_dim / 2));
      for (int i = 0; i < rotary_dim / 2; ++i) {
        const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
        const auto k = static_cast<std::size_t>(i);
        const float divisor = k < ext.size() ? static_cast<float>(ext[k]) : 1.0f;
        out.inv_freq[k] = 1.0f / (divisor * std::pow(static_cast<float>(rope.theta), exponent));
      }
      if (rope.attention_factor) {
        out.attention_factor = static_cast<float>(*rope.attention_factor);
      } else if (rope.factor > 1.0 && rope.original_max_position_embeddings > 1) {
        out.attention_factor = static_cast<float>(std::sqrt(
            1.0 + std::log(rope.factor) /
                      std::log(static_cast<double>(rope.original_max_position_embeddings))));
      }
      break;
    }
  }
  return out;
}

}  // namespace weft::model
