#pragma once
// A plain, slow reference of each zoo family's forward pass, written from the Hugging Face
// modeling code's semantics directly on the checkpoint's tensors as stored (Conv1D [in, out]
// weights, Bloom's [heads, 3, head_dim] and Falcon's [kv_heads, group + 2, head_dim] fused
// qkv, ALiBi added as slope * key position, Gemma's (1 + w)), so it shares no code with Weft's
// load-time rewrites or kernels. Full causal recompute over one sequence, double accumulators.

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "weft/tensor.hpp"

namespace weft::testing::zoo {

enum class Family { kGpt2, kOpt, kOptPost, kGemma, kPhi3, kBloom, kFalcon, kFalconMqa };

struct Dims {
  int vocab = 32, hidden = 16, inter = 32, layers = 2, heads = 4, kv_heads = 4, head_dim = 4;
  int max_pos = 16;
  int orig_max = 4;  // phi3 longrope
  std::vector<double> short_factor{1.0, 1.5}, long_factor{2.0, 4.0};
};

using Vec = std::vector<double>;

// Named f32 tensors with deterministic random values.
struct Weights {
  std::map<std::string, TensorView> map;
  std::mt19937 rng{1234};
  void add(const std::string& name, std::vector<std::int64_t> shape, double scale,
           double mean = 0.0) {
    std::int64_t n = 1;
    for (auto d : shape)
      n *= d;
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v)
      x = static_cast<float>(mean + scale * dist(rng));
    map[name] = make_f32_tensor(std::move(shape), std::move(v));
  }
  double at(const std::string& name, std::int64_t i) const { return map.at(name).as<float>()[i]; }
  bool has(const std::string& name) const { return map.count(name) != 0; }
};

inline Vec layer_norm(const Vec& x, const Weights& w, const std::string& name, double eps) {
  double mean = 0, var = 0;
  for (double v : x)
    mean += v;
  mean /= static_cast<double>(x.size());
  for (double v : x)
    var += (v - mean) * (v - mean);
  var /= static_cast<double>(x.size());
  Vec out(x.size());
  const std::string bias = name.substr(0, name.size() - 6) + "bias";
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto k = static_cast<std::int64_t>(i);
    out[i] =
        (x[i] - mean) / std::sqrt(var + eps) * w.at(name, k) + (w.has(bias) ? w.at(bias, k) : 0);
  }
  return out;
}

inline Vec rms_norm(const Vec& x, const Weights& w, const std::string& name, double eps,
                    double offset) {
  double ss = 0;
  for (double v : x)
    ss += v * v;
  const double scale = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  Vec out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    out[i] = x[i] * scale * (offset + w.at(name, static_cast<std::int64_t>(i)));
  return out;
}

// y = W x (+ b) for nn.Linear's [out, in]; y = x W (+ b) for Conv1D's [in, out].
inline Vec linear(const Vec& x, const Weights& w, const std::string& name, bool conv1d = false) {
  const auto& t = w.map.at(name);
  const std::int64_t out_dim = conv1d ? t.shape[1] : t.shape[0];
  const std::int64_t in_dim = conv1d ? t.shape[0] : t.shape[1];
  const std::string bias = name.substr(0, name.size() - 6) + "bias";
  Vec y(static_cast<std::size_t>(out_dim));
  for (std::int64_t o = 0; o < out_dim; ++o) {
    double acc = w.has(bias) ? w.at(bias, o) : 0.0;
    for (std::int64_t i = 0; i < in_dim; ++i)
      acc += x[static_cast<std::size_t>(i)] *
             (conv1d ? w.at(name, i * out_dim + o) : w.at(name, o * in_dim + i));
    y[static_cast<std::size_t>(o)] = acc;
  }
  return y;
}

inline double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
inline double gelu_erf(double x) {
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}
inline double silu(double x) {
  return x / (1.0 + std::exp(-x));
}

// transformers' build_alibi_tensor slopes, in doubles.
inline Vec bloom_slopes(int heads) {
  const int closest = 1 << static_cast<int>(std::floor(std::log2(heads)));
  const double base = std::pow(2.0, -std::pow(2.0, -(std::log2(closest) - 3)));
  Vec s;
  for (int i = 1; i <= closest; ++i)
    s.push_back(std::pow(base, i));
  if (closest != heads) {
    const double extra = std::pow(2.0, -std::pow(2.0, -(std::log2(2 * closest) - 3)));
    for (int i = 1; i < 1 + 2 * (heads - closest); i += 2)
      s.push_back(std::pow(extra, i));
  }
  return s;
}

// Rotates x ([heads, head_dim], half-split pairs) at `pos` by inv_freq, cos/sin scaled.
inline void rope(Vec& x, int heads, int head_dim, double pos, const Vec& inv_freq, double factor) {
  const int half = head_dim / 2;
  for (int h = 0; h < heads; ++h) {
    for (int i = 0; i < half; ++i) {
      const double a = pos * inv_freq[static_cast<std::size_t>(i)];
      const double c = std::cos(a) * factor, s = std::sin(a) * factor;
      double& x1 = x[static_cast<std::size_t>(h * head_dim + i)];
      double& x2 = x[static_cast<std::size_t>(h * head_dim + i + half)];
      const double r1 = x1 * c - x2 * s, r2 = x2 * c + x1 * s;
      x1 = r1;
      x2 = r2;
    }
  }
}

struct Rows {
  std::vector<Vec> q, k, v;  // per position
};

// Causal attention of every position; GQA maps head h to kv head h / (heads / kv_heads).
inline std::vector<Vec> attention(const Rows& r, int heads, int kv_heads, int head_dim,
                                  const Vec* slopes) {
  const std::size_t T = r.q.size();
  std::vector<Vec> out(T, Vec(static_cast<std::size_t>(heads * head_dim)));
  for (std::size_t t = 0; t < T; ++t) {
    for (int h = 0; h < heads; ++h) {
      const int kvh = h / (heads / kv_heads);
      Vec s(t + 1);
      double mx = -1e300;
      for (std::size_t j = 0; j <= t; ++j) {
        double d = 0;
        for (int i = 0; i < head_dim; ++i)
          d += r.q[t][static_cast<std::size_t>(h * head_dim + i)] *
               r.k[j][static_cast<std::size_t>(kvh * head_dim + i)];
        s[j] = d / std::sqrt(static_cast<double>(head_dim)) +
               (slopes ? (*slopes)[static_cast<std::size_t>(h)] * static_cast<double>(j) : 0.0);
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (auto& e : s)
        sum += (e = std::exp(e - mx));
      for (std::size_t j = 0; j <= t; ++j)
        for (int i = 0; i < head_dim; ++i)
          out[t][static_cast<std::size_t>(h * head_dim + i)] +=
              s[j] / sum * r.v[j][static_cast<std::size_t>(kvh * head_dim + i)];
    }
  }
  return out;
}

}  // namespace weft::testing::zoo
