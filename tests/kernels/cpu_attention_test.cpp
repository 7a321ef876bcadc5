// Paged attention, rope, norms and activations against plain reference loops.

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/norm.hpp"
#include "kernels/cpu/paged_attention.hpp"
#include "kernels/cpu/rope.hpp"
#include "kernels/cpu/softmax.hpp"

namespace weft::cpu {
namespace {

// Keys/values scattered over shuffled pages must give what contiguous attention gives.
TEST(PagedAttention, MatchesContiguousAttentionWithGqaAndWindow) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const std::size_t heads = 6, kv_heads = 2, dim = 12, page = 3, len = 10;
  std::vector<float> keys(len * kv_heads * dim), values(len * kv_heads * dim), q(heads * dim);
  for (auto* v : {&keys, &values, &q})
    for (auto& x : *v)
      x = dist(rng);
  const std::vector<int> table{3, 0, 2, 1};  // deliberately out of order
  std::vector<float> storage(4 * 2 * kv_heads * page * dim, 0.0f);
  std::vector<const void*> pages;
  for (int p : table)
    pages.push_back(storage.data() + p * 2 * kv_heads * page * dim);
  PagedKv kv{pages.data(), page, kv_heads, dim};
  for (std::size_t pos = 0; pos < len; ++pos) {
    for (std::size_t h = 0; h < kv_heads; ++h) {
      auto* k = static_cast<float*>(const_cast<void*>(kv.key(pos, h)));
      auto* v = static_cast<float*>(const_cast<void*>(kv.value(pos, h)));
      for (std::size_t d = 0; d < dim; ++d) {
        k[d] = keys[(pos * kv_heads + h) * dim + d];
        v[d] = values[(pos * kv_heads + h) * dim + d];
      }
    }
  }
  for (auto path : {KernelPath::kScalar, KernelPath::kAvx2}) {
    for (auto [first, last] : {std::pair<std::size_t, std::size_t>{0, 9}, {4, 7}, {5, 5}}) {
      std::vector<float> out(heads * dim), scratch(len);
      paged_attention(q.data(), heads, kv, first, last, 0.3f, out.data(), scratch.data(), path);
      for (std::size_t h = 0; h < heads; ++h) {
        const std::size_t g = h / (heads / kv_heads);
        std::vector<double> s;
        double max = -1e30, sum = 0;
        for (std::size_t j = first; j <= last; ++j) {
          double dot = 0;
          for (std::size_t d = 0; d < dim; ++d)
            dot += q[h * dim + d] * keys[(j * kv_heads + g) * dim + d];
          s.push_back(dot * 0.3);
          max = std::max(max, s.back());
        }
        for (auto& x : s)
          sum += (x = std::exp(x - max));
        for (std::size_t d = 0; d < dim; ++d) {
          double want = 0;
          for (std::size_t j = first; j <= last; ++j) {
            want += s[j - first] / sum * values[(j * kv_heads + g) * dim + d];
          }
          EXPECT_NEAR(out[h * dim + d], want, 1e-5) << "head " << h << " dim " << d;
        }
      }
    }
  }
}

TEST(Rope, HalfSplitAndInterleavedRotateTheirPairs) {
  const float cos[2] = {0.0f, 1.0f}, sin[2] = {1.0f, 0.0f};  // 90 degrees, then none
  float half[5] = {1, 2, 3, 4, 9};  // head_dim 5, rotary_dim 4: the last entry passes through
  apply_rope(half, 1, 5, 4, cos, sin, RopePairing::kHalfSplit);
  // pairs (0,2) rotate by 90 degrees: (1,3) -> (-3,1); (1,3) i.e. (2,4) stay.
  EXPECT_FLOAT_EQ(half[0], -3);
  EXPECT_FLOAT_EQ(half[2], 1);
  EXPECT_FLOAT_EQ(half[1], 2);
  EXPECT_FLOAT_EQ(half[3], 4);
  EXPECT_FLOAT_EQ(half[4], 9);
  float inter[4] = {1, 2, 3, 4};
  apply_rope(inter, 1, 4, 4, cos, sin, RopePairing::kInterleaved);
  EXPECT_FLOAT_EQ(inter[0], -2);  // pair (0,1) rotated
  EXPECT_FLOAT_EQ(inter[1], 1);
  EXPECT_FLOAT_EQ(inter[2], 3);  // pair (2,3) unrotated
  EXPECT_FLOAT_EQ(inter[3], 4);
}

TEST(Norm, RmsAndLayerNormMatchTheirFormulas) {
  const float x[6] = {1, -2, 3, 0.5f, 0.25f, -1};
  const float w[3] = {1, 2, 0.5f}, b[3] = {0.1f, 0, -0.1f};
  float out[6];
  for (auto path : {KernelPath::kScalar, KernelPath::kAvx2}) {
    rms_norm(x, 2, 3, w, 1e-5f, out, path);
    for (int t = 0; t < 2; ++t) {
      const double ms =
          (x[3 * t] * x[3 * t] + x[3 * t + 1] * x[3 * t + 1] + x[3 * t + 2] * x[3 * t + 2]) / 3.0;
      for (int i = 0; i < 3; ++i)
        EXPECT_NEAR(out[3 * t + i], x[3 * t + i] / std::sqrt(ms + 1e-5) * w[i], 1e-5);
    }
  }
  layer_norm(x, 2, 3, w, b, 1e-5f, out);
  const double mean = (1 - 2 + 3) / 3.0,
               var =
                   ((1 - mean) * (1 - mean) + (-2 - mean) * (-2 - mean) + (3 - mean) * (3 - mean)) /
                   3;
  EXPECT_NEAR(out[1], (-2 - mean) / std::sqrt(var + 1e-5) * 2 + 0, 1e-5);
}

TEST(Activation, KnownValues) {
  EXPECT_NEAR(activate(ActivationKind::kSilu, 1.0f), 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(activate(ActivationKind::kGelu, 1.0f), 0.8413447460685429, 1e-6);
  EXPECT_NEAR(activate(ActivationKind::kGeluTanh, 1.0f), 0.8411919906082768, 1e-6);
  EXPECT_EQ(activate(ActivationKind::kRelu, -3.0f), 0.0f);
  float gate[2] = {1.0f, -1.0f};
  const float up[2] = {2.0f, 3.0f};
  gated_activation(ActivationKind::kRelu, gate, up, 2);
  EXPECT_EQ(gate[0], 2.0f);
  EXPECT_EQ(gate[1], 0.0f);
}

TEST(Softmax, SumsToOneAndLogSoftmaxAgrees) {
  float x[4] = {1000.0f, 1001.0f, 999.0f, -5.0f};  // large values: max must be subtracted
  float logp[4];
  log_softmax(x, 4, logp);
  softmax_inplace(x, 4);
  float sum = 0;
  for (int i = 0; i < 4; ++i) {
    sum += x[i];
    EXPECT_NEAR(std::exp(logp[i]), x[i], 1e-6);
  }
  EXPECT_NEAR(sum, 1.0f, 1e-6);
  EXPECT_GT(x[1], x[0]);
}

}  // namespace
}  // namespace weft::cpu
