// The CUDA kernels the model zoo added (alibi_attention, residual_norm, learned_positions)
// against their CPU counterparts on random inputs of awkward sizes. Skips without a GPU.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/embedding.hpp"
#include "kernels/cpu/norm.hpp"
#include "kernels/cpu/paged_attention.hpp"
#include "kernels/cuda/alibi_attention.hpp"
#include "kernels/cuda/convert.hpp"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/learned_positions.hpp"
#include "kernels/cuda/residual_norm.hpp"
#include "tests/kernels/cuda_test_buffer.hpp"

namespace weft::cuda {
namespace {

template <class T>
using Dev = test_support::DeviceArray<T>;

using Half = std::uint16_t;

std::unique_ptr<Dev<Half>> to_half(const std::vector<float>& v, Precision p,
                                   std::vector<float>* rounded) {
  Dev<float> f(v);
  auto h = std::make_unique<Dev<Half>>(v.size());
  convert_to_precision(f.get(), SourceType::kF32, h->get(), p, v.size(), nullptr);
  Dev<float> back(v.size());
  convert_to_f32(h->get(), p, back.get(), v.size(), nullptr);
  *rounded = back.download();
  return h;
}

std::vector<float> from_half(const Dev<Half>& h, std::size_t n, Precision p) {
  Dev<float> f(n);
  convert_to_f32(h.get(), p, f.get(), n, nullptr);
  return f.download();
}

std::vector<float> random_vector(std::size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v)
    x = dist(rng);
  return v;
}

double rounding(Precision p) {
  return p == Precision::kBF16 ? 1.0 / 128 : 1.0 / 1024;
}

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, double rel,
                     double abs_tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << " element " << i;
    ASSERT_LE(std::fabs(got[i] - want[i]), rel * std::fabs(want[i]) + abs_tol)
        << what << ": element " << i << " got " << got[i] << " want " << want[i];
  }
}

using CudaZooKernels = test_support::PrecisionTest;

// Two sequences over shuffled pages (the second a shorter context on the same pages), GQA,
// head dims that are and are not multiples of 32, with and without a window.
TEST_P(CudaZooKernels, AlibiAttentionMatchesCpuPagedAttentionWithSlopes) {
  std::mt19937 rng(3);
  for (int D : {16, 80, 128}) {
    for (int window : {0, 9}) {
      const int NH = 6, NKV = 2, page_size = 3, layers = 2, layer = 1, context = 70;
      const std::size_t layer_elems = 2ull * NKV * page_size * D;
      const std::size_t page_elems = layers * layer_elems;
      const int pages_needed = (context + page_size - 1) / page_size;
      std::vector<std::int32_t> table(pages_needed + 4);
      std::iota(table.begin(), table.end(), 0);
      std::shuffle(table.begin(), table.end(), rng);
      const int pool_pages = static_cast<int>(table.size());
      table.resize(pages_needed);
      std::vector<float> pool_r;
      auto pool = to_half(random_vector(page_elems * pool_pages, rng), p(), &pool_r);
      const std::vector<std::int32_t> positions{0, 1, 33, context - 1, 5, 20};
      const std::vector<std::int32_t> token_seq{0, 0, 0, 0, 1, 1};
      std::vector<std::int32_t> page_ids = table;
      page_ids.insert(page_ids.end(), table.begin(), table.end());
      const std::vector<std::int32_t> table_begin{0, pages_needed};
      const int T = static_cast<int>(positions.size());
      const int stride = (NH + 2 * NKV) * D;  // q inside a qkv row, as the model passes it
      const auto q = random_vector(static_cast<std::size_t>(T) * stride, rng);
      const std::vector<float> slopes{0.25f, 0.0625f, 0.015625f, 0.00390625f, 0.5f, 0.125f};
      Dev<float> dq(q), dslopes(slopes);
      Dev<std::int32_t> dpos(positions), dseq(token_seq), dpages(page_ids), dbegin(table_begin);
      Dev<Half> out(static_cast<std::size_t>(T) * NH * D);
      FlatBatchView fb{dpos.get(), dseq.get(), dbegin.get(), dpages.get(), T};
      PagedKvView kv{pool->get(), p(), page_elems, layer * layer_elems, page_size, NKV, D};
      AttentionArgs a;
      a.q = dq.get();
      a.q_stride = static_cast<std::size_t>(stride);
      a.num_heads = NH;
      a.scale = 1.0f / std::sqrt(static_cast<float>(D));
      a.sliding_window = window;
      a.out = out.get();
      alibi_attention(a, dslopes.get(), fb, kv, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto got = from_half(out, static_cast<std::size_t>(T) * NH * D, p());
      std::vector<float> want(got.size());
      std::vector<const void*> blocks;
      for (int page : table)
        blocks.push_back(pool_r.data() + page * page_elems + layer * layer_elems);
      const cpu::PagedKv view{blocks.data(), static_cast<std::size_t>(page_size),
                              static_cast<std::size_t>(NKV), static_cast<std::size_t>(D)};
      for (int t = 0; t < T; ++t) {
        const int pos = positions[t];
        const int first = window > 0 && pos + 1 > window ? pos + 1 - window : 0;
        std::vector<float> scratch(pos + 1);
        cpu::paged_attention(q.data() + t * stride, NH, view, first, pos, a.scale,
                             want.data() + t * NH * D, scratch.data(), cpu::KernelPath::kScalar,
                             slopes.data());
      }
      expect_near_all(got, want, 2 * rounding(p()), 2e-3,
                      "alibi head_dim " + std::to_string(D) + " window " + std::to_string(window));
    }
  }
}

TEST_P(CudaZooKernels, ResidualNormMatchesCpuNormsAndWritesBothCopies) {
  std::mt19937 rng(4);
  const int rows = 5, n = 77;
  for (auto kind : {NormKind::kRms, NormKind::kLayer}) {
    for (bool with_delta : {false, true}) {
      const auto x = random_vector(rows * n, rng), delta = random_vector(rows * n, rng);
      const auto delta_bias = random_vector(n, rng), weight = random_vector(n, rng);
      const auto bias = random_vector(n, rng);
      Dev<float> dx(x), dd(delta), ddb(delta_bias), dw(weight), db(bias);
      Dev<Half> out(rows * n);
      ResidualNormArgs a;
      a.residual = dx.get();
      a.delta = with_delta ? dd.get() : nullptr;
      a.delta_bias = with_delta ? ddb.get() : nullptr;
      a.rows = rows;
      a.n = n;
      a.kind = kind;
      a.weight = dw.get();
      a.bias = kind == NormKind::kLayer ? db.get() : nullptr;
      a.eps = 1e-5f;
      a.out = out.get();
      a.precision = p();
      residual_norm(a, nullptr);
      std::vector<float> sum = x;
      if (with_delta) {
        for (int r = 0; r < rows; ++r)
          for (int i = 0; i < n; ++i)
            sum[r * n + i] += delta[r * n + i] + delta_bias[i];
      }
      std::vector<float> want(sum.size());
      if (kind == NormKind::kRms) {
        cpu::rms_norm(sum.data(), rows, n, weight.data(), 1e-5f, want.data());
      } else {
        cpu::layer_norm(sum.data(), rows, n, weight.data(), bias.data(), 1e-5f, want.data());
      }
      const std::string what =
          std::string(kind == NormKind::kRms ? "rms" : "layer") + (with_delta ? " with delta" : "");
      expect_near_all(dx.download(), want, 1e-5, 1e-5, what + " residual");
      expect_near_all(from_half(out, rows * n, p()), want, rounding(p()), 1e-5, what + " out");
    }
  }
}

TEST_P(CudaZooKernels, AddResidualAndRowsToPrecision) {
  std::mt19937 rng(5);
  const int rows = 3, n = 45;
  const auto x = random_vector(rows * n, rng), d = random_vector(rows * n, rng);
  const auto bias = random_vector(n, rng);
  Dev<float> dx(x), dd(d), db(bias);
  add_residual(dx.get(), dd.get(), db.get(), rows, n, nullptr);
  std::vector<float> want = x;
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < n; ++i)
      want[r * n + i] += d[r * n + i] + bias[i];
  expect_near_all(dx.download(), want, 1e-6, 1e-6, "add_residual");
  const std::vector<std::int32_t> pick{2, 0};
  Dev<std::int32_t> dpick(pick);
  Dev<Half> out(2 * n);
  rows_to_precision(dx.get(), dpick.get(), 2, n, out.get(), p(), nullptr);
  std::vector<float> picked(want.begin() + 2 * n, want.end());
  picked.insert(picked.end(), want.begin(), want.begin() + n);
  expect_near_all(from_half(out, 2 * n, p()), picked, rounding(p()), 1e-6, "rows_to_precision");
}

TEST_P(CudaZooKernels, ScaleAddPositionsMatchesCpuEmbedding) {
  std::mt19937 rng(6);
  const int hidden = 70, rows = 11, offset = 2;
  const auto x = random_vector(4 * hidden, rng);
  std::vector<float> table_r;
  auto table = to_half(random_vector(rows * hidden, rng), p(), &table_r);
  const std::vector<std::int32_t> positions{0, 8, 3, 8};
  Dev<float> dx(x);
  Dev<std::int32_t> dpos(positions);
  scale_add_positions(dx.get(), 4, hidden, 8.0f, table->get(), p(), dpos.get(), offset, nullptr);
  // The CPU kernel gathers token rows; feed it x itself as a table with tokens 0..3.
  const cpu::EmbeddingTable tokens{DType::kF32, reinterpret_cast<const std::byte*>(x.data()), 4,
                                   static_cast<std::size_t>(hidden)};
  const cpu::EmbeddingTable pos{DType::kF32, reinterpret_cast<const std::byte*>(table_r.data()),
                                static_cast<std::size_t>(rows), static_cast<std::size_t>(hidden)};
  const std::int32_t ids[] = {0, 1, 2, 3};
  std::vector<float> want(x.size());
  cpu::embed_tokens(tokens, ids, 4, 8.0f, &pos, positions.data(), offset, want.data());
  expect_near_all(dx.download(), want, 1e-6, 1e-6, "scale_add_positions");
  // Scale only (Gemma): no table.
  Dev<float> dy(x);
  scale_add_positions(dy.get(), 4, hidden, 0.5f, nullptr, p(), dpos.get(), 0, nullptr);
  std::vector<float> half_x = x;
  for (auto& v : half_x)
    v *= 0.5f;
  expect_near_all(dy.download(), half_x, 0, 0, "scale only");
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaZooKernels,
                         ::testing::Values(Precision::kBF16, Precision::kF16),
                         [](const auto& info) { return std::string(precision_name(info.param)); });

}  // namespace
}  // namespace weft::cuda
