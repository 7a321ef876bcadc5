// The CUDA encoder's kernels (kernels/cuda/encoder.hpp) against their CPU references on random
// inputs of awkward sizes: encoder_attention against cpu::encoder_attention (sequences of 1 to
// 70 tokens packed end to end, head dims that are and are not multiples of 32, up to 256),
// encoder_post_norm against cpu::layer_norm. Skips without a GPU.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/encoder_attention.hpp"
#include "kernels/cpu/norm.hpp"
#include "kernels/cuda/convert.hpp"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/encoder.hpp"
#include "tests/kernels/cuda_test_buffer.hpp"

namespace weft::cuda {
namespace {

using test_support::DeviceArray;
using test_support::widened;

class CudaEncoderKernels : public test_support::PrecisionTest {
 protected:
  // The output is rounded once to 16 bits from fp32 sums.
  double rounding() const { return p() == Precision::kBF16 ? 1.0 / 128 : 1.0 / 1024; }
};

TEST_P(CudaEncoderKernels, AttentionMatchesCpuReference) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const int D : {24, 64, 80, 256}) {
    for (const bool with_bias : {false, true}) {
      const int NH = 3;
      // Tiles of 16 queries: lengths below, at and across tile and 32-key chunk borders.
      const std::vector<int> lengths = {1, 16, 70, 5, 33, 17};
      int T = 0;
      for (int len : lengths)
        T += len;
      const int width = NH * D, stride = 3 * width + 4;
      std::vector<float> qkv(static_cast<std::size_t>(T) * stride), bias(3 * width, 0.0f);
      for (auto& x : qkv)
        x = dist(rng);
      if (with_bias) {
        for (auto& x : bias)
          x = 0.5f * dist(rng);
      }
      const float scale = 1.0f / std::sqrt(static_cast<float>(D));
      std::vector<float> want(static_cast<std::size_t>(T) * width);
      cpu::encoder_attention(qkv.data(), stride, with_bias ? bias.data() : nullptr, lengths, NH, D,
                             scale, want.data());

      std::vector<EncoderTile> tiles;
      int at = 0;
      for (const int len : lengths) {
        for (int first = 0; first < len; first += kEncoderTileQueries)
          tiles.push_back({at + first, std::min(kEncoderTileQueries, len - first), at, len});
        at += len;
      }
      DeviceArray<float> d_qkv(qkv), d_bias(bias);
      DeviceArray<EncoderTile> d_tiles(tiles);
      DeviceArray<std::uint16_t> d_out(static_cast<std::size_t>(T) * width);
      EncoderAttentionArgs args;
      args.qkv = d_qkv.get();
      args.qkv_stride = stride;
      args.qkv_bias = with_bias ? d_bias.get() : nullptr;
      args.num_heads = NH;
      args.head_dim = D;
      args.scale = scale;
      args.out = d_out.get();
      args.precision = p();
      encoder_attention(args, d_tiles.get(), static_cast<int>(tiles.size()), nullptr);
      ASSERT_EQ(cudaGetLastError(), cudaSuccess);
      const auto got = widened(d_out, want.size(), p());
      for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_TRUE(std::isfinite(got[i])) << "D " << D << " element " << i;
        ASSERT_LE(std::fabs(got[i] - want[i]), rounding() * std::fabs(want[i]) + 1e-4)
            << "D " << D << " bias " << with_bias << " token " << i / width << " col " << i % width
            << ": got " << got[i] << " want " << want[i];
      }
    }
  }
}

TEST_P(CudaEncoderKernels, PostNormMatchesCpuLayerNorm) {
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const int n : {32, 312, 768, 1000}) {
    for (const bool with_delta : {false, true}) {
      const int rows = 7;
      const auto count = static_cast<std::size_t>(rows) * n;
      std::vector<float> x(count), delta(count), delta_bias(n), w(n), b(n);
      for (auto* v : {&x, &delta, &delta_bias, &w, &b}) {
        for (auto& e : *v)
          e = dist(rng);
      }
      std::vector<float> sum = x;
      if (with_delta) {
        for (std::size_t i = 0; i < count; ++i)
          sum[i] += delta[i] + delta_bias[i % n];
      }
      std::vector<float> want(count);
      cpu::layer_norm(sum.data(), rows, n, w.data(), b.data(), 1e-12f, want.data(),
                      cpu::KernelPath::kScalar);
      DeviceArray<float> d_x(x), d_delta(delta), d_delta_bias(delta_bias), d_w(w), d_b(b);
      DeviceArray<std::uint16_t> d_out(count);
      encoder_post_norm(d_x.get(), with_delta ? d_delta.get() : nullptr,
                        with_delta ? d_delta_bias.get() : nullptr, rows, n, d_w.get(), d_b.get(),
                        1e-12f, d_out.get(), p(), nullptr);
      ASSERT_EQ(cudaGetLastError(), cudaSuccess);
      const auto residual = d_x.download();
      const auto out = widened(d_out, count, p());
      for (std::size_t i = 0; i < count; ++i) {
        ASSERT_NEAR(residual[i], want[i], 1e-4 * (1 + std::fabs(want[i])))
            << "n " << n << " element " << i;
        ASSERT_LE(std::fabs(out[i] - want[i]), rounding() * std::fabs(want[i]) + 1e-4)
            << "n " << n << " element " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaEncoderKernels,
                         ::testing::Values(Precision::kBF16, Precision::kF16),
                         [](const auto& info) { return std::string(precision_name(info.param)); });

}  // namespace
}  // namespace weft::cuda
