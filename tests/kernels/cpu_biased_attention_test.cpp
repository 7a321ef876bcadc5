// Biased attention (T5's relative position biases, encoder-decoder cross-attention) against a
// plain double-precision loop, on keys and values scattered over shuffled pages.

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/biased_attention.hpp"

namespace weft::cpu {
namespace {

struct Pages {
  std::vector<float> storage;
  std::vector<const void*> pages;
  PagedKv kv;
};

// len positions of K and V for kv_heads heads in pages of `page` slots, page table shuffled.
Pages scatter(const std::vector<float>& keys, const std::vector<float>& values, std::size_t len,
              std::size_t kv_heads, std::size_t dim, std::size_t page) {
  Pages p;
  const std::size_t count = (len + page - 1) / page;
  p.storage.assign(count * 2 * kv_heads * page * dim, 0.0f);
  std::vector<std::size_t> order(count);
  for (std::size_t i = 0; i < count; ++i)
    order[i] = (i * 5 + 3) % count;  // a permutation when count is not a multiple of 5
  for (auto o : order)
    p.pages.push_back(p.storage.data() + o * 2 * kv_heads * page * dim);
  p.kv = PagedKv{p.pages.data(), page, kv_heads, dim};
  for (std::size_t pos = 0; pos < len; ++pos) {
    for (std::size_t h = 0; h < kv_heads; ++h) {
      auto* k = static_cast<float*>(const_cast<void*>(p.kv.key(pos, h)));
      auto* v = static_cast<float*>(const_cast<void*>(p.kv.value(pos, h)));
      for (std::size_t d = 0; d < dim; ++d) {
        k[d] = keys[(pos * kv_heads + h) * dim + d];
        v[d] = values[(pos * kv_heads + h) * dim + d];
      }
    }
  }
  return p;
}

TEST(BiasedAttention, MatchesReferenceWithPerHeadBiasAndGqa) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const std::size_t heads = 6, kv_heads = 3, dim = 7, page = 3, len = 11;
  std::vector<float> keys(len * kv_heads * dim), values(len * kv_heads * dim), q(heads * dim);
  for (auto* v : {&keys, &values, &q})
    for (auto& x : *v)
      x = dist(rng);
  Pages p = scatter(keys, values, len, kv_heads, dim, page);
  for (auto path : {KernelPath::kScalar, KernelPath::kAvx2}) {
    for (auto [first, last] : {std::pair<std::size_t, std::size_t>{0, 10}, {3, 8}, {6, 6}}) {
      const std::size_t span = last - first + 1;
      std::vector<float> bias(heads * span);
      for (auto& b : bias)
        b = 2.0f * dist(rng);
      for (const bool with_bias : {true, false}) {
        std::vector<float> out(heads * dim), scratch(span);
        biased_attention(q.data(), heads, p.kv, first, last, 0.7f,
                         with_bias ? bias.data() : nullptr, out.data(), scratch.data(), path);
        for (std::size_t h = 0; h < heads; ++h) {
          const std::size_t g = h / (heads / kv_heads);
          std::vector<double> s;
          double max = -1e300, sum = 0;
          for (std::size_t j = first; j <= last; ++j) {
            double dot = 0;
            for (std::size_t d = 0; d < dim; ++d)
              dot += q[h * dim + d] * keys[(j * kv_heads + g) * dim + d];
            s.push_back(dot * 0.7 + (with_bias ? bias[h * span + (j - first)] : 0.0));
            max = std::max(max, s.back());
          }
          for (auto& x : s)
            sum += (x = std::exp(x - max));
          for (std::size_t d = 0; d < dim; ++d) {
            double want = 0;
            for (std::size_t j = first; j <= last; ++j)
              want += s[j - first] / sum * values[(j * kv_heads + g) * dim + d];
            EXPECT_NEAR(out[h * dim + d], want, 1e-5)
                << "head " << h << " dim " << d << " range " << first << ".." << last;
          }
        }
      }
    }
  }
}

TEST(BiasedAttention, WithoutBiasEqualsPagedAttention) {
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const std::size_t heads = 4, kv_heads = 4, dim = 16, page = 5, len = 13;
  std::vector<float> keys(len * kv_heads * dim), values(len * kv_heads * dim), q(heads * dim);
  for (auto* v : {&keys, &values, &q})
    for (auto& x : *v)
      x = dist(rng);
  Pages p = scatter(keys, values, len, kv_heads, dim, page);
  std::vector<float> a(heads * dim), b(heads * dim), scratch(len);
  biased_attention(q.data(), heads, p.kv, 0, len - 1, 0.25f, nullptr, a.data(), scratch.data());
  paged_attention(q.data(), heads, p.kv, 0, len - 1, 0.25f, b.data(), scratch.data());
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_FLOAT_EQ(a[i], b[i]);
}

TEST(BiasedAttention, LargeNegativeBiasMasksAKey) {
  // A bias of -1e9 on every key but one: the output is that key's value.
  const std::size_t heads = 1, dim = 4, len = 4;
  std::vector<float> keys(len * dim, 0.5f), values(len * dim), q(dim, 1.0f);
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(i);
  Pages p = scatter(keys, values, len, 1, dim, 2);
  std::vector<float> bias{-1e9f, -1e9f, 0.0f, -1e9f}, out(dim), scratch(len);
  biased_attention(q.data(), heads, p.kv, 0, len - 1, 1.0f, bias.data(), out.data(),
                   scratch.data());
  for (std::size_t d = 0; d < dim; ++d)
    EXPECT_FLOAT_EQ(out[d], values[2 * dim + d]);
}

}  // namespace
}  // namespace weft::cpu
