// cpu::encoder_attention, the reference of the CUDA encoder's attention, against the CPU
// paged attention kernel over one page per sequence (what the CPU encoder runs): sequences of
// awkward lengths packed end to end, with and without a qkv bias.

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/encoder_attention.hpp"
#include "kernels/cpu/paged_attention.hpp"

namespace weft::cpu {
namespace {

TEST(CpuEncoderAttention, MatchesPagedAttentionOverWholeSequences) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const int D : {8, 40}) {
    for (const bool with_bias : {false, true}) {
      const int NH = 3;
      const std::vector<int> lengths = {1, 17, 5, 33};
      int T = 0;
      for (int len : lengths)
        T += len;
      const std::size_t width = static_cast<std::size_t>(NH) * D, stride = 3 * width + 7;
      std::vector<float> qkv(static_cast<std::size_t>(T) * stride), bias(3 * width, 0.0f);
      for (auto& x : qkv)
        x = dist(rng);
      if (with_bias) {
        for (auto& x : bias)
          x = dist(rng);
      }
      const float scale = 1.0f / std::sqrt(static_cast<float>(D));
      std::vector<float> got(static_cast<std::size_t>(T) * width);
      encoder_attention(qkv.data(), stride, with_bias ? bias.data() : nullptr, lengths, NH, D,
                        scale, got.data());

      std::size_t begin = 0;
      for (const int len_i : lengths) {
        const auto len = static_cast<std::size_t>(len_i);
        // K as [heads][slot][head_dim], then V: one page of `len` slots.
        std::vector<float> page(2 * width * len);
        for (std::size_t i = 0; i < len; ++i) {
          for (std::size_t h = 0; h < static_cast<std::size_t>(NH); ++h) {
            for (std::size_t d = 0; d < static_cast<std::size_t>(D); ++d) {
              const std::size_t row = (begin + i) * stride;
              const std::size_t kc = width + h * D + d, vc = 2 * width + h * D + d;
              page[(h * len + i) * D + d] = qkv[row + kc] + bias[kc];
              page[((NH + h) * len + i) * D + d] = qkv[row + vc] + bias[vc];
            }
          }
        }
        const void* pages = page.data();
        const PagedKv view{&pages, len, static_cast<std::size_t>(NH), static_cast<std::size_t>(D),
                           KvDtype::kF32};
        std::vector<float> q(width), want(width), scratch(len);
        for (std::size_t i = 0; i < len; ++i) {
          for (std::size_t c = 0; c < width; ++c)
            q[c] = qkv[(begin + i) * stride + c] + bias[c];
          paged_attention(q.data(), static_cast<std::size_t>(NH), view, 0, len - 1, scale,
                          want.data(), scratch.data(), KernelPath::kScalar);
          for (std::size_t c = 0; c < width; ++c) {
            ASSERT_NEAR(got[(begin + i) * width + c], want[c], 1e-5)
                << "D " << D << " bias " << with_bias << " token " << begin + i << " col " << c;
          }
        }
        begin += len;
      }
    }
  }
}

// A sequence of one token attends only to itself: its output is its value.
TEST(CpuEncoderAttention, OneTokenSequencesReturnTheirValues) {
  const int NH = 2, D = 4;
  const std::size_t width = NH * D, stride = 3 * width;
  std::vector<float> qkv(2 * stride);
  for (std::size_t i = 0; i < qkv.size(); ++i)
    qkv[i] = static_cast<float>(i % 13) - 6.0f;
  std::vector<float> out(2 * width);
  encoder_attention(qkv.data(), stride, nullptr, {1, 1}, NH, D, 0.5f, out.data());
  for (std::size_t t = 0; t < 2; ++t) {
    for (std::size_t c = 0; c < width; ++c)
      EXPECT_FLOAT_EQ(out[t * width + c], qkv[t * stride + 2 * width + c]);
  }
}

}  // namespace
}  // namespace weft::cpu
