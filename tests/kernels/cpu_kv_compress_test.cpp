// KV-Compress's CPU kernels (kernels/cpu/kv_compress.hpp) against plain loops: the window's
// aggregated attention per kv head, and attention over each head's compacted survivors, which
// must equal dense attention over that head's own kept rows (every head keeping a different
// set), for f32 and int8 pages (whose row scales move with their rows).

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/kv_compress.hpp"
#include "kernels/cpu/kv_quant.hpp"
#include "kernels/cpu/paged_attention.hpp"

namespace weft::cpu {
namespace {

// Pages of one layer, shuffled in memory, holding `len` tokens of random K and V.
struct Pages {
  std::size_t page_size, kv_heads, dim;
  KvDtype dtype;
  std::vector<unsigned char> storage;
  std::vector<void*> table;
  std::vector<float> keys, values;  // [len][kv_heads][dim], as stored (rounded for int8)

  std::size_t element_bytes() const { return kv_element_bytes(dtype); }
  std::size_t elements_bytes() const { return 2 * kv_heads * page_size * dim * element_bytes(); }
  std::size_t scales_offset() const { return (elements_bytes() + 15) / 16 * 16; }
  std::size_t block_bytes() const {
    return scales_offset() + (kv_dtype_scaled(dtype) ? 2 * kv_heads * page_size * 4 : 0);
  }
  MutablePagedKv mutable_kv() {
    return {table.data(), page_size, kv_heads, dim, dtype, scales_offset()};
  }

  Pages(std::size_t page, std::size_t heads, std::size_t d, KvDtype t, std::size_t len,
        std::mt19937& rng)
      : page_size(page), kv_heads(heads), dim(d), dtype(t) {
    const std::size_t pages = (len + page - 1) / page;
    storage.assign((pages + 1) * block_bytes(), 0);
    for (std::size_t i = 0; i < pages; ++i)  // page i of the table is block pages - i
      table.push_back(storage.data() + (pages - i) * block_bytes());
    std::normal_distribution<float> dist(0.0f, 1.0f);
    keys.resize(len * heads * d);
    values.resize(len * heads * d);
    for (std::size_t pos = 0; pos < len; ++pos) {
      for (std::size_t h = 0; h < heads; ++h) {
        for (const bool value : {false, true}) {
          std::vector<float> row(d);
          for (auto& x : row)
            x = dist(rng);
          auto* block = static_cast<unsigned char*>(table[pos / page]);
          const std::size_t head = (value ? heads : 0) + h;
          void* dst = block + (head * page + pos % page) * d * element_bytes();
          const float scale = store_kv_row(dtype, row.data(), d, dst);
          if (kv_dtype_scaled(dtype)) {
            reinterpret_cast<float*>(block + scales_offset())[head * page + pos % page] = scale;
          }
          load_kv_row(dtype, dst, scale, d, row.data());  // what the kernels will read
          auto& out = value ? values : keys;
          std::copy(row.begin(), row.end(), out.begin() + static_cast<long>((pos * heads + h) * d));
        }
      }
    }
  }
};

// Dense attention of one query head over the rows `rows` of its kv head.
std::vector<double> dense_attention(const float* q, const Pages& p, std::size_t kv_head,
                                    const std::vector<int>& rows, float scale) {
  std::vector<double> logits;
  double max = -1e300;
  for (int r : rows) {
    double dot = 0;
    for (std::size_t d = 0; d < p.dim; ++d)
      dot += static_cast<double>(q[d]) *
             p.keys[(static_cast<std::size_t>(r) * p.kv_heads + kv_head) * p.dim + d];
    logits.push_back(dot * scale);
    max = std::max(max, logits.back());
  }
  double sum = 0;
  for (auto& x : logits)
    sum += (x = std::exp(x - max));
  std::vector<double> out(p.dim, 0.0);
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::size_t d = 0; d < p.dim; ++d)
      out[d] += logits[i] / sum *
                p.values[(static_cast<std::size_t>(rows[i]) * p.kv_heads + kv_head) * p.dim + d];
  return out;
}

TEST(KvCompressKernels, WindowScoresAreTheSummedSoftmaxOfTheWindowsQueries) {
  std::mt19937 rng(5);
  const std::size_t heads = 6, kv_heads = 2, dim = 12, page = 5, len = 23, window = 4;
  const float scale = 0.29f;
  for (auto dtype : {KvDtype::kF32, KvDtype::kInt8}) {
    Pages p(page, kv_heads, dim, dtype, len, rng);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> q(window * heads * dim);
    for (auto& x : q)
      x = dist(rng);
    for (auto path : {KernelPath::kScalar, KernelPath::kAvx2}) {
      std::vector<float> scores(kv_heads * len), scratch(len);
      window_attention_scores(q.data(), window, heads, p.mutable_kv().view(), len, scale,
                              scores.data(), scratch.data(), path);
      std::vector<double> want(kv_heads * len, 0.0);
      for (std::size_t w = 0; w < window; ++w) {
        const std::size_t last = len - window + w;
        for (std::size_t h = 0; h < heads; ++h) {
          const std::size_t g = h / (heads / kv_heads);
          std::vector<double> logits;
          double max = -1e300, sum = 0;
          for (std::size_t j = 0; j <= last; ++j) {
            double dot = 0;
            for (std::size_t d = 0; d < dim; ++d)
              dot += static_cast<double>(q[(w * heads + h) * dim + d]) *
                     p.keys[(j * kv_heads + g) * dim + d];
            logits.push_back(dot * scale);
            max = std::max(max, logits.back());
          }
          for (auto& x : logits)
            sum += (x = std::exp(x - max));
          for (std::size_t j = 0; j <= last; ++j)
            want[g * len + j] += logits[j] / sum;
        }
      }
      double total = 0;
      for (std::size_t i = 0; i < want.size(); ++i) {
        EXPECT_NEAR(scores[i], want[i], 1e-5) << kv_dtype_name(dtype) << " index " << i;
        total += scores[i];
      }
      // Each (query, head) pair spreads a weight of 1.
      EXPECT_NEAR(total, static_cast<double>(window * heads), 1e-4);
    }
  }
}

TEST(KvCompressKernels, AttentionOverCompactedSurvivorsEqualsDenseAttentionOverEachHeadsRows) {
  std::mt19937 rng(9);
  const std::size_t heads = 4, kv_heads = 2, dim = 8, page = 4, len = 19;
  const float scale = 0.35f;
  // Each head keeps its own 11 of the 19 rows (the last 3 always).
  const std::vector<std::vector<int>> kept{{0, 1, 4, 5, 6, 9, 12, 15, 16, 17, 18},
                                           {2, 3, 7, 8, 10, 11, 13, 14, 16, 17, 18}};
  for (auto dtype : {KvDtype::kF32, KvDtype::kInt8, KvDtype::kFp8E4M3}) {
    Pages p(page, kv_heads, dim, dtype, len, rng);
    const MutablePagedKv kv = p.mutable_kv();
    for (std::size_t h = 0; h < kv_heads; ++h)
      compact_kv_head(kv, h, kept[h].data(), kept[h].size());
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> q(heads * dim);
    for (auto& x : q)
      x = dist(rng);
    std::vector<float> out(heads * dim), scratch(len);
    paged_attention(q.data(), heads, kv.view(), 0, kept[0].size() - 1, scale, out.data(),
                    scratch.data());
    for (std::size_t h = 0; h < heads; ++h) {
      const std::size_t g = h / (heads / kv_heads);
      const auto want = dense_attention(q.data() + h * dim, p, g, kept[g], scale);
      for (std::size_t d = 0; d < dim; ++d)
        EXPECT_NEAR(out[h * dim + d], want[d], 1e-5) << kv_dtype_name(dtype) << " head " << h;
    }
    // The rows themselves (and their scales) moved: slot i of head g reads row kept[g][i].
    for (std::size_t g = 0; g < kv_heads; ++g) {
      for (std::size_t i = 0; i < kept[g].size(); ++i) {
        std::vector<float> row(dim);
        load_kv_row(dtype, kv.view().value(i, g), kv.view().value_scale(i, g), dim, row.data());
        for (std::size_t d = 0; d < dim; ++d) {
          EXPECT_EQ(row[d],
                    p.values[(static_cast<std::size_t>(kept[g][i]) * kv_heads + g) * dim + d]);
        }
      }
    }
  }
}

// Per-head cells (variable KV-Compress): each kv head reads its slots from its own list of
// (block, head rows) cells, as many slots as its shift allows. Here kv head 0 reads kv head
// 1's rows of pages 2, 0, 1 (11 slots), and kv head 1 reads kv head 0's rows of every page
// (19 slots, 8 past the query's last slot): attention must equal dense attention over exactly
// those rows, scales included.
TEST(KvCompressKernels, AttentionThroughHeadCellsEqualsDenseAttentionOverEachHeadsCells) {
  std::mt19937 rng(11);
  const std::size_t heads = 4, kv_heads = 2, dim = 8, page = 4, len = 19;
  const float scale = 0.31f;
  for (auto dtype : {KvDtype::kF32, KvDtype::kInt8, KvDtype::kFp8E4M3}) {
    Pages p(page, kv_heads, dim, dtype, len, rng);
    const std::size_t per_head = 5;
    std::vector<const void*> blocks(kv_heads * per_head, nullptr);
    std::vector<int> rows(kv_heads * per_head, 0);
    const int order[] = {2, 0, 1};
    for (std::size_t j = 0; j < 3; ++j) {
      blocks[j] = p.table[static_cast<std::size_t>(order[j])];
      rows[j] = 1;
    }
    for (std::size_t j = 0; j < per_head; ++j) {
      blocks[per_head + j] = p.table[j];
      rows[per_head + j] = 0;
    }
    const std::vector<int> shift{0, 8};
    PagedKv view = p.mutable_kv().view();
    view.head_blocks = blocks.data();
    view.head_rows = rows.data();
    view.cells_per_head = per_head;
    view.head_shift = shift.data();
    std::vector<int> rows_of_0, rows_of_1;  // the rows each kv head's slots hold
    for (int slot = 0; slot <= 10; ++slot)
      rows_of_0.push_back(order[slot / 4] * 4 + slot % 4);
    for (int slot = 0; slot < 19; ++slot)
      rows_of_1.push_back(slot);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> q(heads * dim);
    for (auto& x : q)
      x = dist(rng);
    std::vector<float> out(heads * dim), scratch(len);
    paged_attention(q.data(), heads, view, 0, 10, scale, out.data(), scratch.data());
    for (std::size_t h = 0; h < heads; ++h) {
      const std::size_t g = h / (heads / kv_heads);
      // kv head 0's cells hold kv head 1's rows and the other way round.
      const auto want =
          dense_attention(q.data() + h * dim, p, 1 - g, g == 0 ? rows_of_0 : rows_of_1, scale);
      for (std::size_t d = 0; d < dim; ++d)
        EXPECT_NEAR(out[h * dim + d], want[d], 1e-5) << kv_dtype_name(dtype) << " head " << h;
    }
  }
}

}  // namespace
}  // namespace weft::cpu
