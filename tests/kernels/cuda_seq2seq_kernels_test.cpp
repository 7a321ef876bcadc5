// The encoder-decoder kernels (kernels/cuda/seq2seq.hpp) against a double-precision host
// reference on random inputs: seq2seq_attention over fp32 keys laid out as a qkv product
// (rows of 1 to 1500 keys, head dims 16, 24, 64 and 256, with and without a relative bias table
// whose distances are clamped), and over 16-bit cache rows written by store_rows16 at an
// offset, and over the same rows scattered over pages (equal bit for bit); add_bias_rows and
// scale_add_rows. Skips without a GPU.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cuda/convert.hpp"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/seq2seq.hpp"
#include "tests/kernels/cuda_test_buffer.hpp"

namespace weft::cuda {
namespace {

template <class T>
using Device = test_support::DeviceArray<T>;
using test_support::widened;

std::vector<float> random(std::size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v)
    x = d(rng);
  return v;
}

// softmax_j(q . k_j * scale + bias(j - query)) . v_j for one head, in double.
std::vector<double> reference(const float* q, const float* keys, const float* values,
                              std::size_t stride, int n, int D, float scale, const float* bias,
                              int radius, int query) {
  std::vector<double> s(static_cast<std::size_t>(n));
  double m = -1e300;
  for (int j = 0; j < n; ++j) {
    double dot = 0;
    for (int d = 0; d < D; ++d)
      dot += static_cast<double>(q[d]) * scale * keys[static_cast<std::size_t>(j) * stride + d];
    if (bias != nullptr) dot += bias[std::clamp(j - query, -radius, radius) + radius];
    s[static_cast<std::size_t>(j)] = dot;
    m = std::max(m, dot);
  }
  double sum = 0;
  for (double& x : s) {
    x = std::exp(x - m);
    sum += x;
  }
  std::vector<double> out(static_cast<std::size_t>(D), 0.0);
  for (int j = 0; j < n; ++j) {
    for (int d = 0; d < D; ++d) {
      out[static_cast<std::size_t>(d)] +=
          s[static_cast<std::size_t>(j)] / sum * values[static_cast<std::size_t>(j) * stride + d];
    }
  }
  return out;
}

using CudaSeq2SeqKernels = test_support::PrecisionTest;

TEST_P(CudaSeq2SeqKernels, AttentionOverAQkvProductMatchesTheReference) {
  const Precision P = GetParam();
  const double tolerance = P == Precision::kBF16 ? 2e-2 : 3e-3;  // the output's rounding
  std::mt19937 rng(11);
  for (const int D : {16, 24, 64, 256}) {
    for (const bool with_bias : {false, true}) {
      const int heads = 3, radius = 10;
      // A long row only for small heads, so the host reference stays quick.
      const std::vector<int> lengths =
          D <= 24 ? std::vector<int>{1, 5, 33, 300, 1500} : std::vector<int>{1, 5, 33, 130};
      int T = 0;
      for (const int n : lengths)
        T += n;
      const std::size_t width = static_cast<std::size_t>(heads) * D;
      const auto qkv = random(static_cast<std::size_t>(T) * 3 * width, rng, 0.5f);
      const auto bias = random(static_cast<std::size_t>(heads) * (2 * radius + 1), rng);
      Device<float> d_qkv(qkv), d_bias(bias);
      std::vector<Seq2SeqAttentionRow> rows;
      std::vector<int> query_of;
      for (int s = 0, at = 0; s < static_cast<int>(lengths.size()); ++s) {
        for (int i = 0; i < lengths[static_cast<std::size_t>(s)]; ++i) {
          rows.push_back({d_qkv.get() + static_cast<std::size_t>(at) * 3 * width,
                          lengths[static_cast<std::size_t>(s)], i});
        }
        at += lengths[static_cast<std::size_t>(s)];
      }
      Device<Seq2SeqAttentionRow> d_rows(rows);
      Device<std::uint16_t> out(static_cast<std::size_t>(T) * width);
      Seq2SeqAttentionArgs a;
      a.q = d_qkv.get();
      a.q_stride = static_cast<int>(3 * width);
      a.kv = KvSource::kF32;
      a.k_offset = width;
      a.v_offset = 2 * width;
      a.kv_stride = 3 * width;
      a.num_heads = heads;
      a.head_dim = D;
      a.scale = 0.3f;
      a.position_bias = with_bias ? d_bias.get() : nullptr;
      a.bias_radius = radius;
      a.max_keys = *std::max_element(lengths.begin(), lengths.end());
      a.out = out.get();
      a.precision = P;
      seq2seq_attention(a, d_rows.get(), T, nullptr);
      ASSERT_EQ(cudaGetLastError(), cudaSuccess);
      const auto got = widened(out, static_cast<std::size_t>(T) * width, P);
      double worst = 0;
      for (int t = 0, at = 0, s = 0; t < T; ++t) {
        if (t - at >= lengths[static_cast<std::size_t>(s)])
          at += lengths[static_cast<std::size_t>(s++)];
        const int n = lengths[static_cast<std::size_t>(s)];
        for (int h = 0; h < heads; ++h) {
          const float* base = qkv.data() + static_cast<std::size_t>(at) * 3 * width;
          const auto want = reference(
              qkv.data() + static_cast<std::size_t>(t) * 3 * width +
                  static_cast<std::size_t>(h) * D,
              base + width + static_cast<std::size_t>(h) * D,
              base + 2 * width + static_cast<std::size_t>(h) * D, 3 * width, n, D, 0.3f,
              with_bias ? bias.data() + static_cast<std::size_t>(h) * (2 * radius + 1) : nullptr,
              radius, t - at);
          for (int d = 0; d < D; ++d) {
            worst = std::max(
                worst,
                std::fabs(got[static_cast<std::size_t>(t) * width +
                              static_cast<std::size_t>(h) * D + static_cast<std::size_t>(d)] -
                          want[static_cast<std::size_t>(d)]));
          }
        }
      }
      EXPECT_LT(worst, tolerance) << "head_dim " << D << (with_bias ? " with bias" : "");
    }
  }
}

TEST_P(CudaSeq2SeqKernels, StoredCacheRowsAttendAsTheirValues) {
  const Precision P = GetParam();
  std::mt19937 rng(5);
  // A cache of `positions` rows of [layers][k | v][width]; rows written by store_rows16 from
  // a product of stride 3 * width at layer 1, then attention over the first n rows.
  const int layers = 2, heads = 2, D = 32, positions = 40;
  const std::size_t width = static_cast<std::size_t>(heads) * D;
  const std::size_t row = 2 * layers * width;
  Device<std::uint16_t> cache(positions * row);
  ASSERT_EQ(cudaMemset(cache.get(), 0, positions * row * 2), cudaSuccess);
  const auto product = random(static_cast<std::size_t>(positions) * 3 * width, rng, 0.5f);
  const auto bias = random(3 * width, rng, 0.1f);
  Device<float> d_product(product), d_bias(bias);
  add_bias_rows(d_product.get(), positions, static_cast<int>(3 * width),
                static_cast<int>(3 * width), d_bias.get(), nullptr);
  std::vector<void*> dst;
  for (int p = 0; p < positions; ++p)
    dst.push_back(cache.get() + static_cast<std::size_t>(p) * row);
  Device<void*> d_dst(dst);
  const std::size_t k_at = 1 * 2 * width;
  store_rows16(d_product.get() + width, static_cast<int>(3 * width), static_cast<int>(width),
               d_dst.get(), k_at, positions, P, nullptr);
  store_rows16(d_product.get() + 2 * width, static_cast<int>(3 * width), static_cast<int>(width),
               d_dst.get(), k_at + width, positions, P, nullptr);
  std::vector<Seq2SeqAttentionRow> rows;
  for (int p = 0; p < positions; ++p)
    rows.push_back({cache.get(), p + 1, p});  // causal: position p sees keys 0..p
  Device<Seq2SeqAttentionRow> d_rows(rows);
  Device<std::uint16_t> out(static_cast<std::size_t>(positions) * width);
  Seq2SeqAttentionArgs a;
  a.q = d_product.get();
  a.q_stride = static_cast<int>(3 * width);
  a.kv = P == Precision::kBF16 ? KvSource::kBF16 : KvSource::kF16;
  a.k_offset = k_at;
  a.v_offset = k_at + width;
  a.kv_stride = row;
  a.num_heads = heads;
  a.head_dim = D;
  a.scale = 1.0f;
  a.max_keys = positions;
  a.out = out.get();
  a.precision = P;
  seq2seq_attention(a, d_rows.get(), positions, nullptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto got = widened(out, static_cast<std::size_t>(positions) * width, P);
  // The layer-0 half of every cache row stays zero: nothing was written there.
  const auto raw = cache.download();
  for (int p = 0; p < positions; ++p) {
    for (std::size_t i = 0; i < 2 * width; ++i)
      ASSERT_EQ(raw[static_cast<std::size_t>(p) * row + i], 0u);
  }
  std::vector<float> biased = product;
  for (int p = 0; p < positions; ++p) {
    for (std::size_t i = 0; i < 3 * width; ++i)
      biased[static_cast<std::size_t>(p) * 3 * width + i] += bias[i];
  }
  const double tolerance = P == Precision::kBF16 ? 4e-2 : 6e-3;  // keys and values rounded too
  double worst = 0;
  for (int p = 0; p < positions; ++p) {
    for (int h = 0; h < heads; ++h) {
      const float* base = biased.data();
      const auto want = reference(
          base + static_cast<std::size_t>(p) * 3 * width + static_cast<std::size_t>(h) * D,
          base + width + static_cast<std::size_t>(h) * D,
          base + 2 * width + static_cast<std::size_t>(h) * D, 3 * width, p + 1, D, 1.0f, nullptr, 0,
          p);
      for (int d = 0; d < D; ++d) {
        worst = std::max(
            worst, std::fabs(got[static_cast<std::size_t>(p) * width +
                                 static_cast<std::size_t>(h) * D + static_cast<std::size_t>(d)] -
                             want[static_cast<std::size_t>(d)]));
      }
    }
  }
  EXPECT_LT(worst, tolerance);
}

// The engine's pool (CudaSeq2SeqBackend): the same cache rows scattered over pages in another
// order give, through each row's page table, the contiguous rows' output bit for bit (the
// same sums in the same order), with a relative bias and page sizes that do not divide the
// lengths.
TEST_P(CudaSeq2SeqKernels, PagedRowsAttendAsContiguousOnes) {
  const Precision P = GetParam();
  std::mt19937 rng(17);
  const int heads = 3, D = 40, radius = 6;
  const std::size_t width = static_cast<std::size_t>(heads) * D;
  const std::size_t row = 2 * width;  // one layer: [k | v]
  const std::vector<int> lengths = {1, 5, 23, 64};
  for (const int page_size : {1, 4, 16}) {
    int total_pages = 0;
    for (const int n : lengths)
      total_pages += (n + page_size - 1) / page_size;
    // Contiguous rows of each sequence, and a pool whose pages are handed out in reverse.
    const auto values = random(static_cast<std::size_t>(lengths.back()) * row, rng, 0.5f);
    std::vector<std::uint16_t> contiguous(values.size());
    {
      Device<float> f(values);
      Device<std::uint16_t> h(values.size());
      convert_to_precision(f.get(), SourceType::kF32, h.get(), P, values.size(), nullptr);
      contiguous = h.download();
    }
    Device<std::uint16_t> flat(contiguous);
    std::vector<std::uint16_t> pool(static_cast<std::size_t>(total_pages) * page_size * row, 0);
    std::vector<std::int32_t> tables;
    std::vector<std::size_t> table_at;
    int next_page = total_pages - 1;
    for (const int n : lengths) {
      table_at.push_back(tables.size());
      for (int first = 0; first < n; first += page_size) {
        const int page = next_page--;
        tables.push_back(page);
        for (int j = first; j < std::min(n, first + page_size); ++j) {
          std::copy_n(contiguous.begin() + static_cast<std::ptrdiff_t>(j * row), row,
                      pool.begin() +
                          static_cast<std::ptrdiff_t>((static_cast<std::size_t>(page) * page_size +
                                                       static_cast<std::size_t>(j - first)) *
                                                      row));
        }
      }
    }
    Device<std::uint16_t> d_pool(pool);
    Device<std::int32_t> d_tables(tables);
    const auto q = random(lengths.size() * width, rng, 0.5f);
    const auto bias = random(static_cast<std::size_t>(heads) * (2 * radius + 1), rng);
    Device<float> d_q(q), d_bias(bias);
    std::vector<Seq2SeqAttentionRow> flat_rows, paged_rows;
    for (std::size_t s = 0; s < lengths.size(); ++s) {
      const int n = lengths[s];
      flat_rows.push_back({flat.get(), n, n - 1});
      paged_rows.push_back({d_pool.get(), n, n - 1, d_tables.get() + table_at[s]});
    }
    Device<Seq2SeqAttentionRow> d_flat_rows(flat_rows), d_paged_rows(paged_rows);
    const auto R = static_cast<int>(lengths.size());
    Device<std::uint16_t> out_flat(static_cast<std::size_t>(R) * width),
        out_paged(static_cast<std::size_t>(R) * width);
    Seq2SeqAttentionArgs a;
    a.q = d_q.get();
    a.q_stride = static_cast<int>(width);
    a.kv = P == Precision::kBF16 ? KvSource::kBF16 : KvSource::kF16;
    a.k_offset = 0;
    a.v_offset = width;
    a.kv_stride = row;
    a.num_heads = heads;
    a.head_dim = D;
    a.scale = 0.4f;
    a.position_bias = d_bias.get();
    a.bias_radius = radius;
    a.max_keys = lengths.back();
    a.precision = P;
    a.out = out_flat.get();
    seq2seq_attention(a, d_flat_rows.get(), R, nullptr);
    a.out = out_paged.get();
    a.page_size = page_size;
    seq2seq_attention(a, d_paged_rows.get(), R, nullptr);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    EXPECT_EQ(out_paged.download(), out_flat.download()) << "page size " << page_size;
  }
}

TEST_P(CudaSeq2SeqKernels, ScaleAddRows) {
  std::mt19937 rng(3);
  const int T = 7, H = 300, rows_in_table = 20;
  const auto x = random(static_cast<std::size_t>(T) * H, rng);
  const auto table = random(static_cast<std::size_t>(rows_in_table) * H, rng);
  const std::vector<std::int32_t> which = {0, 19, 3, 3, 7, 1, 12};
  Device<float> d_x(x), d_table(table);
  Device<std::int32_t> d_which(which);
  scale_add_rows(d_x.get(), T, H, 2.5f, d_table.get(), d_which.get(), nullptr);
  const auto got = d_x.download();
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < H; ++i) {
      const std::size_t at = static_cast<std::size_t>(t) * H + static_cast<std::size_t>(i);
      EXPECT_FLOAT_EQ(
          got[at],
          x[at] * 2.5f + table[static_cast<std::size_t>(which[static_cast<std::size_t>(t)]) * H +
                               static_cast<std::size_t>(i)]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaSeq2SeqKernels,
                         ::testing::Values(Precision::kBF16, Precision::kF16),
                         [](const auto& p) { return std::string(precision_name(p.param)); });

}  // namespace
}  // namespace weft::cuda
