// The products of a few rows on the GPU: the small-step kernel (gemv.hpp), its gated gate_up
// product (bitwise the product and then the activation kernel), and the row kernel
// (gemv_rows.hpp) against the CPU's matmul, each fed by the kernel just before it on the stream
// (rows_to_precision writes x), as in a decode step: both are launched with programmatic
// dependent launch on Hopper and load their first weights before waiting for that kernel.
// The row kernel's promise is checked bit for bit: a row's outputs are the same whatever the
// number of rows beside it and wherever row_index puts it. Skips without a GPU.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/matmul.hpp"
#include "kernels/cuda/activation.hpp"
#include "kernels/cuda/convert.hpp"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/gemv_rows.hpp"
#include "kernels/cuda/residual_norm.hpp"
#include "tests/kernels/cuda_test_buffer.hpp"

namespace weft::cuda {
namespace {

template <class T>
using Dev = test_support::DeviceArray<T>;
using Half = std::uint16_t;

using test_support::random_vector;
using test_support::widened;

// y (rows x out, row stride ldy) against the CPU's product of the same 16-bit values.
void expect_product(const std::vector<float>& y, int ldy, const std::vector<float>& x16,
                    const std::vector<int>& x_rows, const std::vector<float>& w16, int out, int in,
                    const std::string& what) {
  const cpu::WeightMatrix wm{DType::kF32, w16.data(), static_cast<std::size_t>(out),
                             static_cast<std::size_t>(in)};
  std::vector<float> want(static_cast<std::size_t>(out));
  double worst = 0;
  std::string where;
  for (std::size_t j = 0; j < x_rows.size(); ++j) {
    const float* xr = x16.data() + static_cast<std::size_t>(x_rows[j]) * in;
    cpu::matmul(xr, 1, wm, nullptr, want.data(), nullptr);
    for (int o = 0; o < out; ++o) {
      const float got = y[static_cast<std::size_t>(x_rows[j]) * ldy + o];
      const double excess = std::fabs(got - want[o]) - (1e-4 * std::fabs(want[o]) + 1e-4);
      if (excess > worst || !std::isfinite(got)) {
        worst = std::isfinite(got) ? excess : 1e30;
        where = "row " + std::to_string(x_rows[j]) + " output " + std::to_string(o) + " got " +
                std::to_string(got) + " want " + std::to_string(want[o]);
      }
    }
  }
  EXPECT_LE(worst, 0.0) << what << ": " << where;
}

using CudaGemv = test_support::PrecisionTest;

TEST_P(CudaGemv, SmallStepKernelReadsTheRowsTheKernelBeforeWrote) {
  std::mt19937 rng(11);
  // 1016 = 8 * 127: a remainder after the unrolled chunks; 4096 the model widths.
  for (const int in : {1016, 4096}) {
    const int out = 261;
    const auto w_f = random_vector(static_cast<std::size_t>(out) * in, rng, 0.05f);
    Dev<float> w_dev(w_f);
    Dev<Half> w(w_f.size());
    convert_to_precision(w_dev.get(), SourceType::kF32, w.get(), p(), w_f.size(), nullptr);
    const auto w16 = widened(w, w_f.size(), p());
    for (int tokens = 1; tokens <= kGemvMaxTokens; ++tokens) {
      Dev<float> x_f(random_vector(static_cast<std::size_t>(tokens) * in, rng, 1.0f));
      Dev<Half> x(static_cast<std::size_t>(tokens) * in);
      const int ldy = out + 3;
      Dev<float> y(std::vector<float>(static_cast<std::size_t>(tokens) * ldy, std::nanf("")));
      rows_to_precision(x_f.get(), nullptr, tokens, in, x.get(), p(), nullptr);
      gemv(x.get(), tokens, w.get(), out, in, y.get(), ldy, p(), nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<int> rows(static_cast<std::size_t>(tokens));
      for (int t = 0; t < tokens; ++t)
        rows[static_cast<std::size_t>(t)] = t;
      expect_product(y.download(), ldy, widened(x, static_cast<std::size_t>(tokens) * in, p()),
                     rows, w16, out, in,
                     "gemv in " + std::to_string(in) + " tokens " + std::to_string(tokens));
    }
  }
}

TEST_P(CudaGemv, GatedProductIsTheProductThenTheActivationKernelBitForBit) {
  std::mt19937 rng(13);
  for (const int in : {1016, 4096}) {
    for (const int half : {133, 7168}) {  // gate rows, then as many up rows
      const int out = 2 * half;
      const auto w_f = random_vector(static_cast<std::size_t>(out) * in, rng, 0.05f);
      Dev<float> w_dev(w_f);
      Dev<Half> w(w_f.size());
      convert_to_precision(w_dev.get(), SourceType::kF32, w.get(), p(), w_f.size(), nullptr);
      for (int tokens = 1; tokens <= kGemvGatedMaxTokens; ++tokens) {
        Dev<float> x_f(random_vector(static_cast<std::size_t>(tokens) * in, rng, 1.0f));
        Dev<Half> x(static_cast<std::size_t>(tokens) * in);
        ASSERT_TRUE(gemv_gated_supported(x.get(), tokens, w.get(), out, in));
        for (const ActivationKind kind : {ActivationKind::kSilu, ActivationKind::kGeluTanh}) {
          const auto n = static_cast<std::size_t>(tokens) * half;
          Dev<float> sums(static_cast<std::size_t>(tokens) * out);
          Dev<Half> want(n), got(n);
          rows_to_precision(x_f.get(), nullptr, tokens, in, x.get(), p(), nullptr);
          gemv(x.get(), tokens, w.get(), out, in, sums.get(), out, p(), nullptr);
          mlp_activation(kind, true, sums.get(), nullptr, tokens, half, want.get(), p(), nullptr);
          rows_to_precision(x_f.get(), nullptr, tokens, in, x.get(), p(), nullptr);
          gemv_gated(kind, x.get(), tokens, w.get(), out, in, got.get(), p(), nullptr);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          const auto a = want.download(), b = got.download();
          for (std::size_t i = 0; i < n; ++i) {
            ASSERT_EQ(a[i], b[i]) << "in " << in << " half " << half << " tokens " << tokens
                                  << " element " << i;
          }
          const auto widened_a = widened(want, n, p());
          const auto at = static_cast<std::size_t>(rng() % n);
          ASSERT_TRUE(std::isfinite(widened_a[at]));
        }
      }
    }
  }
}

TEST_P(CudaGemv, RowKernelMatchesTheCpuAndEachRowHasTheSameBitsAtEveryRowCount) {
  std::mt19937 rng(12);
  const int out = 300;                // not a multiple of the block's 16 rows
  for (const int in : {544, 4096}) {  // 544 = 32 * 17: a remainder after the unrolled chunks
    const auto w_f = random_vector(static_cast<std::size_t>(out) * in, rng, 0.05f);
    Dev<float> w_dev(w_f);
    Dev<Half> w(w_f.size());
    convert_to_precision(w_dev.get(), SourceType::kF32, w.get(), p(), w_f.size(), nullptr);
    const auto w16 = widened(w, w_f.size(), p());
    const int all = kGemvRowsMax + 8;  // x has more rows than any call reads
    Dev<float> x_f(random_vector(static_cast<std::size_t>(all) * in, rng, 1.0f));
    Dev<Half> x(static_cast<std::size_t>(all) * in);
    const int ldy = out + 5;
    // Row j's outputs when it is the only row (the reference bits), then in every call below.
    std::vector<std::vector<float>> alone(static_cast<std::size_t>(all));
    auto run = [&](int rows, const std::vector<std::int32_t>& index) {
      Dev<float> y(std::vector<float>(static_cast<std::size_t>(all) * ldy, std::nanf("")));
      rows_to_precision(x_f.get(), nullptr, all, in, x.get(), p(), nullptr);
      std::unique_ptr<Dev<std::int32_t>> index_dev;
      if (!index.empty()) index_dev = std::make_unique<Dev<std::int32_t>>(index);
      gemv_rows(x.get(), rows, index_dev ? index_dev->get() : nullptr, w.get(), out, in, y.get(),
                ldy, p(), nullptr);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      return y.download();
    };
    for (int j = 0; j < all; ++j) {
      const auto y = run(1, {j});
      alone[static_cast<std::size_t>(j)].assign(
          y.begin() + static_cast<std::ptrdiff_t>(j) * ldy,
          y.begin() + static_cast<std::ptrdiff_t>(j) * ldy + out);
    }
    const auto x16 = widened(x, static_cast<std::size_t>(all) * in, p());
    std::vector<int> every(static_cast<std::size_t>(all));
    for (int j = 0; j < all; ++j)
      every[static_cast<std::size_t>(j)] = j;
    std::vector<float> alone_y(static_cast<std::size_t>(all) * ldy);
    for (int j = 0; j < all; ++j)
      std::memcpy(alone_y.data() + static_cast<std::size_t>(j) * ldy,
                  alone[static_cast<std::size_t>(j)].data(), sizeof(float) * out);
    expect_product(alone_y, ldy, x16, every, w16, out, in, "one row, in " + std::to_string(in));
    // 1..32 rows in order (no index), and the same counts over rows picked backwards from the
    // end of x (an index): every row bitwise as alone.
    for (int rows = 1; rows <= kGemvRowsMax; ++rows) {
      std::vector<std::int32_t> backwards(static_cast<std::size_t>(rows));
      for (int j = 0; j < rows; ++j)
        backwards[static_cast<std::size_t>(j)] = all - 1 - 3 * j % all;
      for (const bool indexed : {false, true}) {
        const auto y = run(rows, indexed ? backwards : std::vector<std::int32_t>{});
        for (int j = 0; j < rows; ++j) {
          const int r = indexed ? backwards[static_cast<std::size_t>(j)] : j;
          ASSERT_EQ(std::memcmp(y.data() + static_cast<std::size_t>(r) * ldy,
                                alone[static_cast<std::size_t>(r)].data(), sizeof(float) * out),
                    0)
              << "in " << in << ", " << rows << " rows" << (indexed ? " by index" : "") << ": row "
              << r << " differs from its product alone";
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaGemv, ::testing::Values(Precision::kBF16, Precision::kF16),
                         [](const ::testing::TestParamInfo<Precision>& param) {
                           return std::string(precision_name(param.param));
                         });

}  // namespace
}  // namespace weft::cuda
