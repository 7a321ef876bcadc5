// KV rows in int8 and fp8 (e4m3): the fp8 conversion against its definition, quantize /
// dequantize round trips within the formats' rounding, the fused products against a widened
// row, and paged attention over int8/fp8/16-bit pages against the same keys in fp32.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/kv_quant.hpp"
#include "kernels/cpu/paged_attention.hpp"

namespace weft::cpu {
namespace {

TEST(Fp8E4M3, EncodesKnownValues) {
  EXPECT_EQ(f32_to_fp8_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_fp8_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_fp8_e4m3(1.0f), 0x38);   // exponent 7 (bias 7), mantissa 0
  EXPECT_EQ(f32_to_fp8_e4m3(-2.0f), 0xc0);  // sign, exponent 8
  EXPECT_EQ(f32_to_fp8_e4m3(1.125f), 0x39);
  EXPECT_EQ(f32_to_fp8_e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(1e6f), 0x7e);  // saturates, no infinity in e4m3fn
  EXPECT_EQ(f32_to_fp8_e4m3(-1e6f), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(std::nanf("")) & 0x7f, 0x7f);
  EXPECT_EQ(f32_to_fp8_e4m3(0x1p-9f), 0x01);     // smallest subnormal
  EXPECT_EQ(f32_to_fp8_e4m3(0x1p-11f), 0x00);    // a quarter of it rounds to zero
  EXPECT_EQ(f32_to_fp8_e4m3(0x1.8p-10f), 0x01);  // 0.75 of it rounds up
  EXPECT_EQ(f32_to_fp8_e4m3(0x1p-6f), 0x08);     // smallest normal
  // Ties go to the even mantissa: 1 + 1/16 is halfway between 1 and 1.125.
  EXPECT_EQ(f32_to_fp8_e4m3(1.0625f), 0x38);
  EXPECT_EQ(f32_to_fp8_e4m3(1.1875f), 0x3a);  // halfway between 1.125 and 1.25
  // A carry out of the mantissa moves into the exponent: 1.9375 rounds to 2.
  EXPECT_EQ(f32_to_fp8_e4m3(1.9375f), 0x40);
}

TEST(Fp8E4M3, EveryCodeDecodesAndEncodesBack) {
  for (int code = 0; code < 256; ++code) {
    const auto bits = static_cast<std::uint8_t>(code);
    const float value = fp8_e4m3_to_f32(bits);
    if ((code & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(value)) << code;
      continue;
    }
    EXPECT_EQ(f32_to_fp8_e4m3(value), bits) << "code " << code << " value " << value;
  }
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), 0x1p-9f);
}

// The nearest of two neighbouring codes: encoding any value picks one at least as close.
TEST(Fp8E4M3, RoundsToTheNearestCode) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-460.0f, 460.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = i % 2 == 0 ? dist(rng) : dist(rng) / 4096.0f;
    const float got = fp8_e4m3_to_f32(f32_to_fp8_e4m3(x));
    const float clamped = std::clamp(x, -448.0f, 448.0f);
    for (int code = 0; code < 256; ++code) {
      if ((code & 0x7f) == 0x7f) continue;
      const float other = fp8_e4m3_to_f32(static_cast<std::uint8_t>(code));
      ASSERT_LE(std::fabs(got - clamped), std::fabs(other - clamped)) << x;
    }
  }
}

std::vector<float> random_row(std::mt19937& rng, std::size_t n, float spread) {
  std::normal_distribution<float> dist(0.0f, spread);
  std::vector<float> x(n);
  for (auto& v : x)
    v = dist(rng);
  return x;
}

TEST(KvQuant, Int8RoundTripIsWithinHalfAStep) {
  std::mt19937 rng(1);
  for (std::size_t n : {1u, 7u, 64u, 128u, 131u}) {
    auto x = random_row(rng, n, 3.0f);
    x[n / 2] = -9.5f;  // the row's largest magnitude, negative
    std::vector<std::int8_t> q(n);
    const float scale = store_kv_row(KvDtype::kInt8, x.data(), n, q.data());
    EXPECT_FLOAT_EQ(scale, 9.5f / 127.0f);
    EXPECT_EQ(q[n / 2], -127);
    std::vector<float> back(n);
    load_kv_row(KvDtype::kInt8, q.data(), scale, n, back.data());
    for (std::size_t i = 0; i < n; ++i)
      EXPECT_LE(std::fabs(back[i] - x[i]), 0.5f * scale * 1.0001f) << "n " << n << " i " << i;
  }
}

TEST(KvQuant, Fp8RoundTripKeepsFourSignificantBits) {
  std::mt19937 rng(2);
  for (std::size_t n : {1u, 64u, 128u, 200u}) {
    const auto x = random_row(rng, n, 0.7f);
    std::vector<std::uint8_t> q(n);
    const float scale = store_kv_row(KvDtype::kFp8E4M3, x.data(), n, q.data());
    std::vector<float> back(n);
    load_kv_row(KvDtype::kFp8E4M3, q.data(), scale, n, back.data());
    for (std::size_t i = 0; i < n; ++i) {
      // Relative 2^-4 for normals; the subnormals' absolute step is 2^-9 of the scale.
      const float bound = std::max(std::fabs(x[i]) * 0x1p-4f, scale * 0x1p-10f) * 1.0001f;
      EXPECT_LE(std::fabs(back[i] - x[i]), bound) << "n " << n << " i " << i;
    }
  }
}

TEST(KvQuant, ZeroRowHasScaleZeroAndReadsAsZero) {
  const std::vector<float> zeros(16, 0.0f);
  for (auto dtype : {KvDtype::kInt8, KvDtype::kFp8E4M3}) {
    std::vector<std::uint8_t> q(16, 0xaa);
    EXPECT_EQ(store_kv_row(dtype, zeros.data(), 16, q.data()), 0.0f);
    std::vector<float> back(16, 1.0f);
    load_kv_row(dtype, q.data(), 0.0f, 16, back.data());
    for (float v : back)
      EXPECT_EQ(v, 0.0f);
  }
}

TEST(KvQuant, FloatTypesStoreExactlyWhatTheyCanHold) {
  const std::vector<float> x{1.0f, -2.5f, 0.15625f, 65504.0f};
  for (auto dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kF16}) {
    std::vector<std::uint8_t> raw(x.size() * 4);
    EXPECT_EQ(store_kv_row(dtype, x.data(), x.size(), raw.data()), 1.0f);
    std::vector<float> back(x.size());
    load_kv_row(dtype, raw.data(), 1.0f, x.size(), back.data());
    for (std::size_t i = 0; i < 3; ++i)
      EXPECT_EQ(back[i], x[i]) << kv_dtype_name(dtype);
  }
}

// The fused products equal the widened row's within float summation order.
TEST(KvQuant, DotAndAxpyMatchTheDequantizedRow) {
  std::mt19937 rng(3);
  for (std::size_t n : {96u, 101u, 5u}) {  // whole AVX2 blocks, and a tail
    const auto q = random_row(rng, n, 1.0f);
    const auto x = random_row(rng, n, 2.0f);
    for (auto dtype :
         {KvDtype::kF32, KvDtype::kBF16, KvDtype::kF16, KvDtype::kInt8, KvDtype::kFp8E4M3}) {
      for (auto path : {KernelPath::kScalar, KernelPath::kAvx2}) {
        std::vector<std::uint8_t> raw(n * 4);
        const float scale = store_kv_row(dtype, x.data(), n, raw.data());
        std::vector<float> wide(n);
        load_kv_row(dtype, raw.data(), scale, n, wide.data());
        double want = 0;
        for (std::size_t i = 0; i < n; ++i)
          want += static_cast<double>(q[i]) * wide[i];
        EXPECT_NEAR(dot_kv_row(q.data(), dtype, raw.data(), scale, n, path), want, 1e-4)
            << kv_dtype_name(dtype);
        std::vector<float> out(n, 0.5f);
        axpy_kv_row(-0.75f, dtype, raw.data(), scale, out.data(), n, path);
        for (std::size_t i = 0; i < n; ++i)
          EXPECT_NEAR(out[i], 0.5f - 0.75f * wide[i], 1e-5) << kv_dtype_name(dtype) << " " << i;
      }
    }
  }
}

// Pages of one layer block each in `dtype`, holding the same keys and values: what the
// model's KvCache lays out (K rows, V rows, then K and V scales).
struct Pages {
  std::vector<std::vector<float>> blocks;  // floats for alignment
  std::vector<const void*> table;
  PagedKv view;
};

Pages make_pages(KvDtype dtype, const std::vector<float>& keys, const std::vector<float>& values,
                 std::size_t len, std::size_t kv_heads, std::size_t dim, std::size_t page) {
  Pages p;
  const std::size_t elements = 2 * kv_heads * page * dim * kv_element_bytes(dtype);
  const std::size_t scales_offset = (elements + 15) / 16 * 16;
  const std::size_t bytes = scales_offset + 2 * kv_heads * page * sizeof(float);
  const std::size_t num_pages = (len + page - 1) / page;
  for (std::size_t i = 0; i < num_pages; ++i)
    p.blocks.emplace_back((bytes + 3) / 4, 0.0f);
  // Reverse order: page table entries need not be in memory order.
  for (std::size_t i = 0; i < num_pages; ++i)
    p.table.push_back(p.blocks[num_pages - 1 - i].data());
  p.view = PagedKv{p.table.data(), page, kv_heads, dim, dtype, scales_offset};
  for (std::size_t pos = 0; pos < len; ++pos) {
    auto* block = static_cast<unsigned char*>(const_cast<void*>(p.table[pos / page]));
    auto* scales = reinterpret_cast<float*>(block + scales_offset);
    for (std::size_t h = 0; h < kv_heads; ++h) {
      const std::size_t k_row = h * page + pos % page, v_row = (kv_heads + h) * page + pos % page;
      const std::size_t element = kv_element_bytes(dtype);
      scales[k_row] = store_kv_row(dtype, keys.data() + (pos * kv_heads + h) * dim, dim,
                                   block + k_row * dim * element);
      scales[v_row] = store_kv_row(dtype, values.data() + (pos * kv_heads + h) * dim, dim,
                                   block + v_row * dim * element);
    }
  }
  return p;
}

// Attention over int8, fp8, bf16 and fp16 pages stays within its format's error of the
// fp32 pages' result; it is not the same (the test would pass with no quantization at all
// otherwise: the quantized results must differ from fp32 somewhere).
TEST(PagedAttentionQuantized, StaysWithinToleranceOfFp32Pages) {
  std::mt19937 rng(7);
  const std::size_t heads = 8, kv_heads = 2, dim = 64, page = 5, len = 37;
  const auto keys = random_row(rng, len * kv_heads * dim, 1.0f);
  const auto values = random_row(rng, len * kv_heads * dim, 1.0f);
  const auto q = random_row(rng, heads * dim, 1.0f);
  const float scale = 1.0f / 8.0f;
  const Pages ref = make_pages(KvDtype::kF32, keys, values, len, kv_heads, dim, page);
  struct Case {
    KvDtype dtype;
    float tolerance;  // of the output's largest magnitude
  };
  for (const Case c : {Case{KvDtype::kBF16, 0.01f}, Case{KvDtype::kF16, 0.002f},
                       Case{KvDtype::kInt8, 0.02f}, Case{KvDtype::kFp8E4M3, 0.06f}}) {
    const Pages got_pages = make_pages(c.dtype, keys, values, len, kv_heads, dim, page);
    for (auto [first, last] : {std::pair<std::size_t, std::size_t>{0, 36}, {10, 30}, {0, 0}}) {
      std::vector<float> want(heads * dim), got(heads * dim), scratch(len);
      paged_attention(q.data(), heads, ref.view, first, last, scale, want.data(), scratch.data());
      paged_attention(q.data(), heads, got_pages.view, first, last, scale, got.data(),
                      scratch.data());
      float max_ref = 0, max_err = 0;
      for (std::size_t i = 0; i < want.size(); ++i) {
        max_ref = std::max(max_ref, std::fabs(want[i]));
        max_err = std::max(max_err, std::fabs(got[i] - want[i]));
      }
      EXPECT_LE(max_err, c.tolerance * max_ref)
          << kv_dtype_name(c.dtype) << " positions " << first << ".." << last;
      EXPECT_GT(max_err, 0.0f) << kv_dtype_name(c.dtype) << ": no rounding at all?";
    }
  }
}

}  // namespace
}  // namespace weft::cpu
