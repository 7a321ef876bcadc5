// The residual add and RMS norm inside the dp4a products (kernels/cuda/quant_gemv.hpp,
// QuantNormArgs), q4_b32 and q4_b64, bf16 and fp16, 1 and 2 tokens: a producer (o or down)
// against residual + the fp64 product of its rows (within the bound of its rounded inputs), its
// 16-bit `scaled` rows bitwise residual * weight rounded once, its sums of squares against the
// new residual's; then a consumer (qkv, and the gated gate_up) reading those rows against the
// fp64 product of the normalized rows the add_norm would have written. Skips without a GPU.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/quant_gemv.hpp"
#include "tests/kernels/cuda_quant_fixtures.hpp"
#include "tests/kernels/cuda_test_buffer.hpp"

namespace weft::cuda {
namespace {

using namespace quant_test;

using NormCase = std::tuple<QuantGemvFormat, Precision>;
class CudaQuantNorm : public test_support::GpuTest<NormCase> {};

double silu(double v) {
  return v / (1.0 + std::exp(-v));
}

template <class T>
std::vector<T> download(const T* device, std::size_t n) {
  std::vector<T> host(n);
  EXPECT_EQ(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

TEST_P(CudaQuantNorm, ProducerAddsAndConsumerNormalizes) {
  const auto [format, precision] = GetParam();
  const bool bf16 = precision == Precision::kBF16;
  std::mt19937 rng(17 + static_cast<int>(format));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  // hidden 1088 (a last tile of 2 groups), attention width 512, qkv 200 rows, MLP 2 x 96.
  const int H = 1088, K = 512, R = 200, I = 96;
  const float eps = 1e-5f;
  const Weights wo = make_weights(format, H, K, rng);
  const Weights wq = make_weights(format, R, H, rng);
  const Weights wu = make_weights(format, 2 * I, H, rng);
  for (int tokens = 1; tokens <= 2; ++tokens) {
    SCOPED_TRACE(name_of(format) + " tokens=" + std::to_string(tokens));
    const auto [a16, a] = random_inputs(static_cast<std::size_t>(tokens) * K, precision, rng, dist);
    std::vector<float> residual(static_cast<std::size_t>(tokens) * H), weight(H);
    for (auto& v : residual)
      v = 3.0f * dist(rng);
    for (auto& v : weight)
      v = 1.0f + 0.1f * dist(rng);
    auto* da = upload(a16);
    auto* dres = upload(residual);
    auto* dweight = upload(weight);
    auto* dwo = upload(wo.gpu.words);
    auto* dwq = upload(wq.gpu.words);
    auto* dwu = upload(wu.gpu.words);
    const int count = quant_norm_squares(H);
    std::vector<float> zeros(static_cast<std::size_t>(2) * count, 0.0f);
    auto* dsq = upload(zeros);
    std::vector<std::uint16_t> scaled_init(static_cast<std::size_t>(tokens) * H, 0);
    auto* dscaled = upload(scaled_init);
    std::vector<float> y_init(static_cast<std::size_t>(tokens) * R, 0.0f);
    auto* dy = upload(y_init);
    std::vector<std::uint16_t> act_init(static_cast<std::size_t>(tokens) * I, 0);
    auto* dact = upload(act_init);

    QuantNormArgs out;
    out.residual = dres;
    out.weight = dweight;
    out.scaled = dscaled;
    out.out_squares = dsq;
    quant_gemv_dp4a_norm_out(da, tokens, {dwo, format, H, K}, out, precision, nullptr);
    QuantNormArgs in;
    in.in_squares = dsq;
    in.count = count;
    in.n = H;
    in.eps = eps;
    quant_gemv_dp4a_norm_in(dscaled, tokens, {dwq, format, R, H}, dy, R, -1, nullptr, in, precision,
                            nullptr);
    quant_gemv_dp4a_norm_in(dscaled, tokens, {dwu, format, 2 * I, H}, nullptr, 0,
                            static_cast<int>(ActivationKind::kSilu), dact, in, precision, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto res = download(dres, residual.size());
    const auto scaled = download(dscaled, scaled_init.size());
    const auto squares = download(dsq, zeros.size());
    const auto y = download(dy, y_init.size());
    const auto act = download(dact, act_init.size());
    for (void* p : {static_cast<void*>(da), static_cast<void*>(dres), static_cast<void*>(dweight),
                    static_cast<void*>(dwo), static_cast<void*>(dwq), static_cast<void*>(dwu),
                    static_cast<void*>(dsq), static_cast<void*>(dscaled), static_cast<void*>(dy),
                    static_cast<void*>(dact)})
      cudaFree(p);

    for (int t = 0; t < tokens; ++t) {
      const float* at = a.data() + static_cast<std::size_t>(t) * K;
      double total = 0;
      for (int o = 0; o < H; ++o) {
        const std::size_t i = static_cast<std::size_t>(t) * H + o;
        // The producer: residual + its row, within its product's bound.
        double magnitude = 0;
        const double want = residual[i] + reference_dot(wo, K, o, at, magnitude);
        ASSERT_NEAR(
            res[i], want,
            1e-5 * (magnitude + std::fabs(residual[i])) + rounded_input_bound(format, wo, K, o, at))
            << "residual row " << o;
        // `scaled`: the new residual times the weight, rounded once.
        ASSERT_EQ(scaled[i], to16(precision, res[i] * weight[o])) << "scaled row " << o;
        total += static_cast<double>(res[i]) * res[i];
      }
      double got_total = 0;
      for (int b = 0; b < count; ++b)
        got_total += squares[static_cast<std::size_t>(t) * count + b];
      ASSERT_NEAR(got_total, total, 1e-5 * total) << "sum of squares";
      // The consumers: products of the normalized rows (scaled / rms), within the bound of
      // their own rounded inputs.
      const double inv = 1.0 / std::sqrt(total / H + eps);
      std::vector<float> xs(H);
      for (int k = 0; k < H; ++k)
        xs[k] = from16(precision, scaled[static_cast<std::size_t>(t) * H + k]);
      auto row = [&](const Weights& w, int r, double& magnitude) {
        double sum = 0;
        magnitude = 0;
        for (int k = 0; k < H; ++k) {
          const double p = xs[k] * inv * w.dequantized[static_cast<std::size_t>(r) * H + k];
          sum += p;
          magnitude += std::fabs(p);
        }
        return sum;
      };
      for (int r = 0; r < R; ++r) {
        double magnitude = 0;
        const double want = row(wq, r, magnitude);
        ASSERT_NEAR(y[static_cast<std::size_t>(t) * R + r], want,
                    1e-5 * magnitude + inv * rounded_input_bound(format, wq, H, r, xs.data()))
            << "qkv row " << r;
      }
      const double ulp = bf16 ? 1.0 / 128 : 1.0 / 1024;
      for (int i = 0; i < I; ++i) {
        double mg = 0, mu = 0;
        const double g = row(wu, i, mg), u = row(wu, I + i, mu);
        const double eg = 1e-5 * mg + inv * rounded_input_bound(format, wu, H, i, xs.data());
        const double eu = 1e-5 * mu + inv * rounded_input_bound(format, wu, H, I + i, xs.data());
        const double want = silu(g) * u;
        ASSERT_NEAR(from16(precision, act[static_cast<std::size_t>(t) * I + i]), want,
                    ulp * std::fabs(want) + 1.13 * eg * (std::fabs(u) + eu) +
                        std::fabs(silu(g)) * eu + 1e-6)
            << "gate_up row " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaQuantNorm,
                         ::testing::Combine(::testing::Values(QuantGemvFormat::kQ4B32,
                                                              QuantGemvFormat::kQ4B64),
                                            ::testing::Values(Precision::kBF16, Precision::kF16)),
                         [](const ::testing::TestParamInfo<NormCase>& p) {
                           return name_of(std::get<0>(p.param)) + "_" +
                                  precision_name(std::get<1>(p.param));
                         });

}  // namespace
}  // namespace weft::cuda
