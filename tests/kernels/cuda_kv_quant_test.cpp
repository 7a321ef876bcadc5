// int8 and fp8 (e4m3) KV pages on the GPU: rope_store_kv quantizes each (token, kv head) row
// bitwise as the CPU's store_kv_row does, and decode and prefill attention over quantized
// pages match cpu::paged_attention over the same pages within 16-bit output rounding. Skips
// on machines without a GPU.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/kv_quant.hpp"
#include "kernels/cpu/paged_attention.hpp"
#include "kernels/cpu/vector_math.hpp"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/rope.hpp"

namespace weft::cuda {
namespace {

bool have_gpu() {
  return !visible_devices().devices.empty();
}

// A device copy of a host vector, freed at scope exit.
template <class T>
struct DeviceArray {
  explicit DeviceArray(const std::vector<T>& v) : n(std::max<std::size_t>(v.size(), 1)) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(T)), cudaSuccess);
    if (!v.empty()) {
      EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  ~DeviceArray() { cudaFree(p); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  std::vector<T> download() const {
    std::vector<T> v(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  T* p = nullptr;
  std::size_t n;
};

// The page layout of runtime/model/kv_cache.hpp for one-byte elements: per layer K rows, V
// rows, then K's and V's fp32 scales from a 16-byte aligned offset.
struct QuantLayout {
  int layers = 2, kv_heads = 2, dim = 64, page_size = 3;
  std::size_t rows() const { return 2 * static_cast<std::size_t>(kv_heads) * page_size; }
  std::size_t scales_offset() const { return (rows() * dim + 15) / 16 * 16; }
  std::size_t layer_bytes() const { return (scales_offset() + rows() * 4 + 15) / 16 * 16; }
  std::size_t page_bytes() const { return layer_bytes() * layers; }
};

std::vector<float> random_vector(std::size_t n, std::mt19937& rng, float spread = 1.0f) {
  std::normal_distribution<float> dist(0.0f, spread);
  std::vector<float> v(n);
  for (auto& x : v)
    x = dist(rng);
  return v;
}

const char* name(KvDtype d) {
  return kv_dtype_name(d);
}

// rope_store_kv with rotary_dim 0 (the rows go in as they are) writes every token's k and v
// rows quantized, with their scales, exactly where and as the CPU writes them.
TEST(CudaKvQuant, StoreQuantizesRowsBitwiseAsTheCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (KvDtype dtype : {KvDtype::kInt8, KvDtype::kFp8E4M3}) {
    for (int dim : {64, 128, 80}) {
      QuantLayout ql;
      ql.dim = dim;
      const int NH = 4, NKV = ql.kv_heads, T = 7, layer = 1, pool_pages = 4;
      std::mt19937 rng(static_cast<unsigned>(dim) + static_cast<unsigned>(dtype));
      auto qkv = random_vector(static_cast<std::size_t>(T) * (NH + 2 * NKV) * dim, rng, 2.0f);
      // A row of zeros and a row with one large outlier.
      std::fill_n(qkv.begin() + NH * dim, dim, 0.0f);
      qkv[static_cast<std::size_t>(NH + 2 * NKV + NH + 1) * dim + 3] = 300.0f;
      const std::vector<std::int32_t> positions{0, 1, 2, 3, 4, 5, 6}, token_seq(7, 0);
      const std::vector<std::int32_t> pages{2, 0, 3}, begin{0};
      std::vector<std::uint8_t> pool_host(ql.page_bytes() * pool_pages, 0);
      DeviceArray<float> dqkv(qkv);
      DeviceArray<std::int32_t> dpos(positions), dseq(token_seq), dpages(pages), dbegin(begin);
      DeviceArray<std::uint8_t> pool(pool_host);
      FlatBatchView fb{dpos.p, dseq.p, dbegin.p, dpages.p, T};
      PagedKvView kv{pool.p,
                     Precision::kBF16,
                     ql.page_bytes(),
                     layer * ql.layer_bytes(),
                     ql.page_size,
                     NKV,
                     dim,
                     dtype,
                     ql.scales_offset()};
      RopeArgs ra;
      ra.qkv = dqkv.p;
      ra.num_heads = NH;
      ra.rotary_dim = 0;
      rope_store_kv(ra, fb, kv, nullptr);
      const auto got = pool.download();
      for (int t = 0; t < T; ++t) {
        const int page = pages[static_cast<std::size_t>(t / ql.page_size)], slot = t % ql.page_size;
        const std::uint8_t* block = got.data() + page * ql.page_bytes() + layer * ql.layer_bytes();
        float scales[2];
        for (int r = 0; r < 2 * NKV; ++r) {
          const std::size_t row = static_cast<std::size_t>(r) * ql.page_size + slot;
          std::vector<std::uint8_t> want(static_cast<std::size_t>(dim));
          const float* src =
              qkv.data() + (static_cast<std::size_t>(t) * (NH + 2 * NKV) + NH + r) * dim;
          scales[0] = cpu::store_kv_row(dtype, src, static_cast<std::size_t>(dim), want.data());
          std::memcpy(&scales[1], block + ql.scales_offset() + row * 4, 4);
          const std::string what = std::string(name(dtype)) + " dim " + std::to_string(dim) +
                                   " token " + std::to_string(t) + " row " + std::to_string(r);
          EXPECT_EQ(scales[1], scales[0]) << what;
          EXPECT_EQ(std::memcmp(block + row * dim, want.data(), want.size()), 0) << what;
        }
      }
    }
  }
}

// Quantized pages filled on the host (the CPU's rounding), the attention of the step's
// queries on the GPU against cpu::paged_attention over the same pages.
void check_attention(KvDtype dtype, int dim, int heads, int kv_heads, int context, int window,
                     bool prefill) {
  QuantLayout ql;
  ql.dim = dim;
  ql.kv_heads = kv_heads;
  ql.page_size = 16;
  const int layer = 1;
  std::mt19937 rng(static_cast<unsigned>(dim * 31 + context + window));
  const int pages_needed = (context + ql.page_size - 1) / ql.page_size;
  const int pool_pages = pages_needed + 3;
  std::vector<std::int32_t> table(static_cast<std::size_t>(pool_pages));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  table.resize(static_cast<std::size_t>(pages_needed));
  std::vector<std::uint8_t> pool_host(ql.page_bytes() * pool_pages, 0);
  for (int p = 0; p < context; ++p) {
    std::uint8_t* block = pool_host.data() +
                          table[static_cast<std::size_t>(p / ql.page_size)] * ql.page_bytes() +
                          layer * ql.layer_bytes();
    for (int r = 0; r < 2 * kv_heads; ++r) {
      const std::size_t row = static_cast<std::size_t>(r) * ql.page_size + p % ql.page_size;
      const auto x = random_vector(static_cast<std::size_t>(dim), rng, r < kv_heads ? 1.5f : 1.0f);
      const float scale = cpu::store_kv_row(dtype, x.data(), x.size(), block + row * dim);
      std::memcpy(block + ql.scales_offset() + row * 4, &scale, 4);
    }
  }
  const int count = prefill ? std::min(context, 70) : 1;
  std::vector<std::int32_t> positions, token_seq;
  for (int i = 0; i < count; ++i) {
    positions.push_back(context - count + i);
    token_seq.push_back(0);
  }
  if (!prefill) {  // a second sequence sharing the pages, with a shorter context
    positions.push_back(context / 3);
    token_seq.push_back(1);
  }
  const int T = static_cast<int>(positions.size());
  const auto q = random_vector(static_cast<std::size_t>(T) * heads * dim, rng);
  std::vector<std::int32_t> page_ids = table;
  page_ids.insert(page_ids.end(), table.begin(), table.end());
  const std::vector<std::int32_t> table_begin{0, pages_needed};
  DeviceArray<float> dq(q);
  DeviceArray<std::int32_t> dpos(positions), dseq(token_seq), dpages(page_ids), dbegin(table_begin);
  DeviceArray<std::uint8_t> pool(pool_host);
  DeviceArray<std::uint16_t> out(
      std::vector<std::uint16_t>(static_cast<std::size_t>(T) * heads * dim));
  FlatBatchView fb{dpos.p, dseq.p, dbegin.p, dpages.p, T};
  PagedKvView kv{pool.p,
                 Precision::kBF16,
                 ql.page_bytes(),
                 layer * ql.layer_bytes(),
                 ql.page_size,
                 kv_heads,
                 dim,
                 dtype,
                 ql.scales_offset()};
  AttentionArgs a;
  a.q = dq.p;
  a.q_stride = static_cast<std::size_t>(heads) * dim;
  a.num_heads = heads;
  a.scale = 1.0f / std::sqrt(static_cast<float>(dim));
  a.sliding_window = window;
  a.out = out.p;
  if (prefill) {
    const int per_tile = prefill_tile_queries(dim, dtype);
    EXPECT_EQ(per_tile, kPrefillTileQueries);
    std::vector<std::int32_t> flat;
    for (int i = 0; i < T; i += per_tile) {
      flat.push_back(i);
      flat.push_back(std::min(per_tile, T - i));
    }
    DeviceArray<std::int32_t> dtiles(flat);
    prefill_attention(a, fb, kv, reinterpret_cast<const PrefillTile*>(dtiles.p),
                      static_cast<int>(flat.size() / 2), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  } else {
    EXPECT_FALSE(decode_attention_applies_rope(heads, kv_heads, dim, dtype));
    std::vector<std::int32_t> queries(static_cast<std::size_t>(T));
    std::iota(queries.begin(), queries.end(), 0);
    DeviceArray<std::int32_t> dqueries(queries);
    DeviceArray<float> work(std::vector<float>(
        std::max<std::size_t>(1, decode_workspace_floats(T, heads, dim, context))));
    decode_attention(a, fb, kv, dqueries.p, T, context, work.p, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  const auto got_bits = out.download();
  std::vector<const void*> blocks;
  for (int page : table)
    blocks.push_back(pool_host.data() + page * ql.page_bytes() + layer * ql.layer_bytes());
  const cpu::PagedKv view{blocks.data(),
                          static_cast<std::size_t>(ql.page_size),
                          static_cast<std::size_t>(kv_heads),
                          static_cast<std::size_t>(dim),
                          dtype,
                          ql.scales_offset()};
  float worst = 0, largest = 0;
  for (int t = 0; t < T; ++t) {
    const int pos = positions[static_cast<std::size_t>(t)];
    const int first = window > 0 && pos + 1 > window ? pos + 1 - window : 0;
    std::vector<float> want(static_cast<std::size_t>(heads) * dim),
        scratch(static_cast<std::size_t>(pos) + 1);
    cpu::paged_attention(q.data() + static_cast<std::size_t>(t) * heads * dim,
                         static_cast<std::size_t>(heads), view, static_cast<std::size_t>(first),
                         static_cast<std::size_t>(pos), a.scale, want.data(), scratch.data());
    for (std::size_t i = 0; i < want.size(); ++i) {
      const float got = cpu::bf16_to_f32(got_bits[static_cast<std::size_t>(t) * heads * dim + i]);
      worst = std::max(worst, std::fabs(got - want[i]));
      largest = std::max(largest, std::fabs(want[i]));
    }
  }
  // bf16 output rounding (2^-8 relative) plus, for prefill, the tiles' 16-bit K and V.
  const float tolerance = (prefill ? 0.02f : 0.008f) * largest;
  EXPECT_LE(worst, tolerance) << name(dtype) << (prefill ? " prefill" : " decode") << " dim " << dim
                              << " heads " << heads << "/" << kv_heads << " context " << context
                              << " window " << window;
}

TEST(CudaKvQuant, DecodeAttentionMatchesTheCpuOverTheSamePages) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (KvDtype dtype : {KvDtype::kInt8, KvDtype::kFp8E4M3}) {
    for (int dim : {32, 64, 128, 256, 80}) {
      for (int context : {1, 37, 300, 2100}) {
        check_attention(dtype, dim, 8, 2, context, 0, false);  // the warp kernel (80: scalar)
      }
    }
    check_attention(dtype, 128, 12, 1, 500, 0, false);   // 12 heads per kv head: scalar kernel
    check_attention(dtype, 128, 8, 2, 700, 200, false);  // sliding window
  }
}

TEST(CudaKvQuant, PrefillAttentionMatchesTheCpuOverTheSamePages) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (KvDtype dtype : {KvDtype::kInt8, KvDtype::kFp8E4M3}) {
    for (int dim : {64, 128, 96}) {
      for (int context : {5, 70, 333}) {
        check_attention(dtype, dim, 8, 2, context, 0, true);
      }
    }
    check_attention(dtype, 128, 8, 2, 400, 100, true);
  }
}

}  // namespace
}  // namespace weft::cuda
