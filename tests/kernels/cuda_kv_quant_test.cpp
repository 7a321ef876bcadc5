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
#include "kernels/cuda/decode_attention_stream.hpp"
#include "kernels/cuda/decode_tile_quant_check.hpp"
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

// A pool of `pool_pages` pages whose layer `layer` holds `context` positions of random key and
// value rows through `table`, quantized by the CPU (store_kv_row) with their scales.
// A sequence's page table: `pages` distinct pages of a pool of `pool_pages`, in random order.
std::vector<std::int32_t> page_table(int pool_pages, int pages, std::mt19937& rng) {
  std::vector<std::int32_t> table(static_cast<std::size_t>(pool_pages));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  table.resize(static_cast<std::size_t>(pages));
  return table;
}

std::vector<std::uint8_t> quantized_pool(KvDtype dtype, const QuantLayout& ql, int layer,
                                         const std::vector<std::int32_t>& table, int pool_pages,
                                         int context, std::mt19937& rng) {
  std::vector<std::uint8_t> pool(ql.page_bytes() * pool_pages, 0);
  for (int p = 0; p < context; ++p) {
    std::uint8_t* block = pool.data() +
                          table[static_cast<std::size_t>(p / ql.page_size)] * ql.page_bytes() +
                          layer * ql.layer_bytes();
    for (int r = 0; r < 2 * ql.kv_heads; ++r) {
      const std::size_t row = static_cast<std::size_t>(r) * ql.page_size + p % ql.page_size;
      const auto x =
          random_vector(static_cast<std::size_t>(ql.dim), rng, r < ql.kv_heads ? 1.5f : 1.0f);
      const float scale = cpu::store_kv_row(dtype, x.data(), x.size(), block + row * ql.dim);
      std::memcpy(block + ql.scales_offset() + row * 4, &scale, 4);
    }
  }
  return pool;
}

// cpu::paged_attention over the same pages, the reference of the GPU kernels: every token's
// [heads * dim] outputs in a row, at its position, over the last `window` positions (0: all).
std::vector<float> cpu_attention(const std::vector<std::uint8_t>& pool_host,
                                 const std::vector<std::int32_t>& table, const QuantLayout& ql,
                                 int layer, KvDtype dtype, int heads, const std::vector<float>& q,
                                 const std::vector<std::int32_t>& positions, int window,
                                 float scale) {
  std::vector<const void*> blocks;
  for (int page : table)
    blocks.push_back(pool_host.data() + page * ql.page_bytes() + layer * ql.layer_bytes());
  const cpu::PagedKv view{blocks.data(),
                          static_cast<std::size_t>(ql.page_size),
                          static_cast<std::size_t>(ql.kv_heads),
                          static_cast<std::size_t>(ql.dim),
                          dtype,
                          ql.scales_offset()};
  const std::size_t row = static_cast<std::size_t>(heads) * ql.dim;
  std::vector<float> want(positions.size() * row);
  for (std::size_t t = 0; t < positions.size(); ++t) {
    const int pos = positions[t];
    const int first = window > 0 && pos + 1 > window ? pos + 1 - window : 0;
    std::vector<float> scratch(static_cast<std::size_t>(pos) + 1);
    cpu::paged_attention(q.data() + t * row, static_cast<std::size_t>(heads), view,
                         static_cast<std::size_t>(first), static_cast<std::size_t>(pos), scale,
                         want.data() + t * row, scratch.data());
  }
  return want;
}

// Quantized pages filled on the host (the CPU's rounding), the attention of the step's
// queries on the GPU against cpu::paged_attention over the same pages.
void check_attention(KvDtype dtype, int dim, int heads, int kv_heads, int context, int window,
                     bool prefill, Precision precision = Precision::kBF16) {
  QuantLayout ql;
  ql.dim = dim;
  ql.kv_heads = kv_heads;
  ql.page_size = 16;
  const int layer = 1;
  std::mt19937 rng(static_cast<unsigned>(dim * 31 + context + window));
  const int pages_needed = (context + ql.page_size - 1) / ql.page_size;
  const int pool_pages = pages_needed + 3;
  const auto table = page_table(pool_pages, pages_needed, rng);
  const auto pool_host = quantized_pool(dtype, ql, layer, table, pool_pages, context, rng);
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
  PagedKvView kv{pool.p,   precision, ql.page_bytes(), layer * ql.layer_bytes(), ql.page_size,
                 kv_heads, dim,       dtype,           ql.scales_offset()};
  AttentionArgs a;
  a.q = dq.p;
  a.q_stride = static_cast<std::size_t>(heads) * dim;
  a.num_heads = heads;
  a.scale = 1.0f / std::sqrt(static_cast<float>(dim));
  a.sliding_window = window;
  a.out = out.p;
  if (prefill) {
    // The mma.sync kernel's tiles of 64 where it serves head_dim, else the CUDA-core kernel's.
    const int per_tile = prefill_tile_queries(dim, dtype);
    EXPECT_EQ(per_tile, dim == 64 || dim == 128 ? 64 : kPrefillTileQueries);
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
  const auto want =
      cpu_attention(pool_host, table, ql, layer, dtype, heads, q, positions, window, a.scale);
  float worst = 0, largest = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const float got =
        precision == Precision::kF16 ? cpu::f16_to_f32(got_bits[i]) : cpu::bf16_to_f32(got_bits[i]);
    worst = std::max(worst, std::fabs(got - want[i]));
    largest = std::max(largest, std::fabs(want[i]));
  }
  // bf16 output rounding (2^-8 relative) plus, for prefill, P rounded to 16 bits (the mma.sync
  // kernel, head_dim 64 and 128) or the tiles' K and V times their scales rounded to 16 bits
  // (the CUDA-core kernel).
  const float tolerance = (prefill ? 0.02f : 0.008f) * largest;
  EXPECT_LE(worst, tolerance) << name(dtype) << (prefill ? " prefill" : " decode")
                              << (precision == Precision::kF16 ? " fp16" : " bf16") << " dim "
                              << dim << " heads " << heads << "/" << kv_heads << " context "
                              << context << " window " << window;
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
    check_attention(dtype, 128, 8, 2, 333, 0, true, Precision::kF16);  // fp16 tiles and output
    check_attention(dtype, 64, 8, 4, 200, 0, true, Precision::kF16);
  }
}

// The streaming decode kernel (DecodeAttentionKernel::kStream) over one-byte pages: `batch`
// decode tokens whose positions spread over [0, context) (page and segment boundaries
// crossed, the longest at context - 1), all reading one page table. Checked against
// cpu::paged_attention over the same pages and against the CUDA-core kernel
// (DecodeAttentionKernel::kSplit, which serves quantized pages otherwise), and bitwise
// against itself with the context forced into `parts` parts (the combine kernel's path).
//
// Tolerance: keys and values reach the mma exactly (int8 and e4m3 values are bf16 and fp16
// values), q and the softmax weights as a 16-bit value plus its 16-bit remainder, every sum in
// fp32, so what remains is the output's rounding to the 16-bit type (half an ulp: 2^-9
// relative for bf16, 2^-12 for fp16) and fp32 reordering; each element must be within
// 2^-8 |want| + 2^-12 max|want| (bf16) or 2^-10 |want| + 2^-14 max|want| (fp16) of the CPU.
// The CUDA-core kernel rounds its output too, so against it twice that.
void check_stream_decode(KvDtype dtype, Precision precision, int dim, int heads, int kv_heads,
                         int batch, int context, int window, int parts) {
  QuantLayout ql;
  ql.dim = dim;
  ql.kv_heads = kv_heads;
  ql.page_size = 16;
  const int layer = 0;
  std::mt19937 rng(static_cast<unsigned>(dim * 131 + context * 7 + batch + heads));
  const int pages_needed = (context + ql.page_size - 1) / ql.page_size;
  const int pool_pages = pages_needed + 2;
  const auto table = page_table(pool_pages, pages_needed, rng);
  const auto pool_host = quantized_pool(dtype, ql, layer, table, pool_pages, context, rng);
  std::vector<std::int32_t> positions, token_seq(static_cast<std::size_t>(batch), 0);
  for (int i = 0; i < batch; ++i)
    positions.push_back(context - 1 - static_cast<int>((i * 7919LL) % context));
  const int T = batch;
  const auto q = random_vector(static_cast<std::size_t>(T) * heads * dim, rng);
  const std::vector<std::int32_t> table_begin{0};
  DeviceArray<float> dq(q);
  DeviceArray<std::int32_t> dpos(positions), dseq(token_seq), dpages(table), dbegin(table_begin);
  DeviceArray<std::uint8_t> pool(pool_host);
  std::vector<std::int32_t> queries(static_cast<std::size_t>(T));
  std::iota(queries.begin(), queries.end(), 0);
  DeviceArray<std::int32_t> dqueries(queries);
  DeviceArray<float> work(std::vector<float>(
      std::max<std::size_t>(1, decode_workspace_floats(T, heads, dim, context))));
  FlatBatchView fb{dpos.p, dseq.p, dbegin.p, dpages.p, T};
  PagedKvView kv{pool.p,   precision, ql.page_bytes(), layer * ql.layer_bytes(), ql.page_size,
                 kv_heads, dim,       dtype,           ql.scales_offset()};
  const std::string what =
      std::string(name(dtype)) + (precision == Precision::kF16 ? " fp16" : " bf16") + " dim " +
      std::to_string(dim) + " heads " + std::to_string(heads) + "/" + std::to_string(kv_heads) +
      " batch " + std::to_string(batch) + " context " + std::to_string(context) + " window " +
      std::to_string(window) + " parts " + std::to_string(parts);
  ASSERT_TRUE(detail::decode_stream_supports(heads, kv_heads, dim, dtype)) << what;
  auto run = [&](DecodeAttentionKernel kernel, int forced_parts) {
    DeviceArray<std::uint16_t> out(
        std::vector<std::uint16_t>(static_cast<std::size_t>(T) * heads * dim));
    AttentionArgs a;
    a.q = dq.p;
    a.q_stride = static_cast<std::size_t>(heads) * dim;
    a.num_heads = heads;
    a.scale = 1.0f / std::sqrt(static_cast<float>(dim));
    a.sliding_window = window;
    a.out = out.p;
    const DecodeAttentionKernel kernel_before = decode_attention_kernel();
    const int parts_before = decode_attention_parts();
    set_decode_attention_kernel(kernel);
    set_decode_attention_parts(forced_parts);
    decode_attention(a, fb, kv, dqueries.p, T, context, work.p, nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
    set_decode_attention_kernel(kernel_before);
    set_decode_attention_parts(parts_before);
    return out.download();
  };
  const auto stream = run(DecodeAttentionKernel::kStream, 0);
  const auto cut = run(DecodeAttentionKernel::kStream, parts);
  const auto core = run(DecodeAttentionKernel::kSplit, 0);
  EXPECT_EQ(std::memcmp(stream.data(), cut.data(), stream.size() * 2), 0) << what;
  auto value = [&](std::uint16_t bits) {
    return precision == Precision::kF16 ? cpu::f16_to_f32(bits) : cpu::bf16_to_f32(bits);
  };
  const float rel = precision == Precision::kF16 ? 1.0f / 1024 : 1.0f / 256;
  const auto want = cpu_attention(pool_host, table, ql, layer, dtype, heads, q, positions, window,
                                  1.0f / std::sqrt(static_cast<float>(dim)));
  const std::size_t row = static_cast<std::size_t>(heads) * dim;
  int bad_cpu = 0, bad_core = 0;
  for (int t = 0; t < T; ++t) {
    const int pos = positions[static_cast<std::size_t>(t)];
    const float* token = want.data() + static_cast<std::size_t>(t) * row;
    float largest = 0;
    for (std::size_t i = 0; i < row; ++i)
      largest = std::max(largest, std::fabs(token[i]));
    for (std::size_t i = 0; i < row; ++i) {
      const std::size_t at = static_cast<std::size_t>(t) * row + i;
      const float got = value(stream[at]);
      const float bound = rel * std::fabs(token[i]) + rel / 16 * largest;
      if (std::fabs(got - token[i]) > bound && bad_cpu++ < 3) {
        ADD_FAILURE() << what << ": token " << t << " (position " << pos << ") element " << i
                      << ": stream " << got << ", cpu " << token[i];
      }
      if (std::fabs(got - value(core[at])) > 2 * bound && bad_core++ < 3) {
        ADD_FAILURE() << what << ": token " << t << " (position " << pos << ") element " << i
                      << ": stream " << got << ", cuda-core kernel " << value(core[at]);
      }
    }
  }
}

TEST(CudaKvQuant, StreamingDecodeMatchesTheCpuAndTheCudaCoreKernel) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (KvDtype dtype : {KvDtype::kInt8, KvDtype::kFp8E4M3}) {
    for (Precision precision : {Precision::kBF16, Precision::kF16}) {
      for (int dim : {64, 128, 256}) {
        check_stream_decode(dtype, precision, dim, 8, 2, 5, 300, 0, 2);  // 4 heads per kv head
      }
      check_stream_decode(dtype, precision, 128, 4, 4, 3, 1000, 0, 3);   // no grouping
      check_stream_decode(dtype, precision, 128, 16, 2, 3, 1000, 0, 3);  // 8 per kv head
      check_stream_decode(dtype, precision, 128, 12, 2, 4, 777, 0, 2);   // 6 per kv head
      check_stream_decode(dtype, precision, 128, 8, 2, 1, 1, 0, 1);      // a single key
      check_stream_decode(dtype, precision, 128, 8, 2, 2, 17, 0, 1);     // one page and a key
      check_stream_decode(dtype, precision, 128, 32, 8, 33, 2100, 0, 4);
      check_stream_decode(dtype, precision, 128, 8, 2, 4, 700, 200, 2);  // sliding window
      check_stream_decode(dtype, precision, 64, 8, 1, 64, 513, 0, 3);
    }
  }
}

// The streaming kernel's tile step converts each int8 or e4m3 byte to the mma's 16-bit type
// exactly (every such value is a bf16 and an fp16 value): all 256 bytes, as K and as V read
// them, against the value the CPU decodes. One wrong element could hide inside an attention
// test's tolerance.
TEST(CudaKvQuant, TileConversionIsExactForEveryByte) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (KvDtype dtype : {KvDtype::kInt8, KvDtype::kFp8E4M3}) {
    for (bool fp16 : {false, true}) {
      const std::vector<std::uint16_t> got = detail::convert_one_byte_elements(dtype, fp16);
      ASSERT_EQ(got.size(), 768u) << name(dtype) << (fp16 ? " fp16" : " bf16");
      int bad = 0;
      for (int i = 0; i < 768; ++i) {
        // Entries past 512 are the second key's bytes: 4 (t ^ 1) + j for entry 512 + 4t + j.
        const int at = i % 256, byte = i < 512 ? at : ((at >> 2) ^ 1) * 4 + (at & 3);
        const float want = dtype == KvDtype::kInt8
                               ? static_cast<float>(static_cast<std::int8_t>(byte))
                               : cpu::fp8_e4m3_to_f32(static_cast<std::uint8_t>(byte));
        const float value = fp16 ? cpu::f16_to_f32(got[static_cast<std::size_t>(i)])
                                 : cpu::bf16_to_f32(got[static_cast<std::size_t>(i)]);
        const bool same = std::isnan(want)
                              ? std::isnan(value)
                              : value == want && std::signbit(value) == std::signbit(want);
        if (!same && bad++ < 4) {
          ADD_FAILURE() << name(dtype) << (fp16 ? " fp16" : " bf16") << " byte " << byte
                        << (i < 256 ? " as K" : " as V") << ": " << value << ", want " << want;
        }
      }
      EXPECT_EQ(bad, 0) << name(dtype) << (fp16 ? " fp16" : " bf16");
    }
  }
}

}  // namespace
}  // namespace weft::cuda
