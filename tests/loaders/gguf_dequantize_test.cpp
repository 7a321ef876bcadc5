// The GGUF dequantizers against blocks built by hand from the specification's layouts, with
// the expected values worked out on paper; then the test writer's quantizers round-tripped
// through them.
#include "loaders/gguf_dequantize.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tests/fixtures/gguf/gguf_writer.hpp"

namespace weft::gguf {
namespace {

void set_half(std::vector<std::byte>& block, std::size_t at, std::uint16_t bits) {
  std::memcpy(block.data() + at, &bits, 2);
}
void set(std::vector<std::byte>& block, std::size_t at, int value) {
  block[at] = static_cast<std::byte>(static_cast<std::uint8_t>(value));
}

constexpr std::uint16_t kHalfOne = 0x3C00, kHalfHalf = 0x3800, kHalfTwo = 0x4000,
                        kHalfQuarter = 0x3400;

TEST(GgufDequantize, BlockSizesFollowTheSpecification) {
  EXPECT_EQ(block_geometry(TensorType::kQ4_0).block_bytes, 18u);
  EXPECT_EQ(block_geometry(TensorType::kQ8_0).block_bytes, 34u);
  EXPECT_EQ(block_geometry(TensorType::kQ4_1).block_bytes, 20u);
  EXPECT_EQ(block_geometry(TensorType::kQ5_0).block_bytes, 22u);
  EXPECT_EQ(block_geometry(TensorType::kQ5_1).block_bytes, 24u);
  EXPECT_EQ(block_geometry(TensorType::kQ4_K).block_bytes, 144u);
  EXPECT_EQ(block_geometry(TensorType::kQ5_K).block_bytes, 176u);
  EXPECT_EQ(block_geometry(TensorType::kQ6_K).block_bytes, 210u);
  EXPECT_EQ(block_geometry(TensorType::kQ6_K).block_elements, 256u);
}

TEST(GgufDequantize, Q8_0IsScaleTimesSignedByte) {
  std::vector<std::byte> block(34);
  set_half(block, 0, kHalfHalf);  // d = 0.5
  set(block, 2, -128);
  set(block, 3, -1);
  set(block, 5, 1);
  set(block, 33, 127);
  std::vector<float> out(32);
  ASSERT_TRUE(dequantize(TensorType::kQ8_0, block, out));
  EXPECT_EQ(out[0], -64.0f);
  EXPECT_EQ(out[1], -0.5f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], 0.5f);
  EXPECT_EQ(out[31], 63.5f);
}

TEST(GgufDequantize, Q4_0KeepsValueIInTheLowNibbleAndIPlus16InTheHigh) {
  std::vector<std::byte> block(18);
  set_half(block, 0, kHalfTwo);  // d = 2
  set(block, 2, 0xF0);           // value 0: 0 - 8; value 16: 15 - 8
  set(block, 3, 0x98);           // value 1: 8 - 8; value 17: 9 - 8
  std::vector<float> out(32);
  ASSERT_TRUE(dequantize(TensorType::kQ4_0, block, out));
  EXPECT_EQ(out[0], -16.0f);
  EXPECT_EQ(out[16], 14.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[17], 2.0f);
  EXPECT_EQ(out[2], -16.0f);  // a zero byte is -8 * d
}

TEST(GgufDequantize, Q4_1AddsTheMinimum) {
  std::vector<std::byte> block(20);
  set_half(block, 0, kHalfTwo);  // d = 2
  set_half(block, 2, 0xBC00);    // m = -1
  set(block, 4, 0xF0);           // value 0: 0; value 16: 15
  set(block, 5, 0x31);           // value 1: 1; value 17: 3
  std::vector<float> out(32);
  ASSERT_TRUE(dequantize(TensorType::kQ4_1, block, out));
  EXPECT_EQ(out[0], -1.0f);
  EXPECT_EQ(out[16], 29.0f);
  EXPECT_EQ(out[1], 1.0f);
  EXPECT_EQ(out[17], 5.0f);
}

// Q5_0 and Q5_1 keep value i's fifth bit at bit i of a little-endian 32-bit word.
TEST(GgufDequantize, Q5_0And5_1TakeTheFifthBitFromTheWord) {
  std::vector<std::byte> q50(22);
  set_half(q50, 0, kHalfHalf);  // d = 0.5
  set(q50, 2, 0x01);            // bit 0: value 0
  set(q50, 5, 0x80);            // bit 31: value 31
  set(q50, 6, 0x0F);            // value 0 low 15 (+16 = 31); value 16 low 0
  set(q50, 6 + 15, 0x70);       // value 15 low 0; value 31 low 7 (+16 = 23)
  std::vector<float> out(32);
  ASSERT_TRUE(dequantize(TensorType::kQ5_0, q50, out));
  EXPECT_EQ(out[0], 0.5f * (31 - 16));
  EXPECT_EQ(out[16], 0.5f * (0 - 16));
  EXPECT_EQ(out[15], 0.5f * (0 - 16));
  EXPECT_EQ(out[31], 0.5f * (23 - 16));

  std::vector<std::byte> q51(24);
  set_half(q51, 0, kHalfOne);  // d = 1
  set_half(q51, 2, kHalfTwo);  // m = 2
  set(q51, 4 + 2, 0x01);       // bit 16: value 16
  set(q51, 8 + 0, 0x53);       // value 0 low 3; value 16 low 5 (+16 = 21)
  ASSERT_TRUE(dequantize(TensorType::kQ5_1, q51, out));
  EXPECT_EQ(out[0], 3.0f + 2.0f);
  EXPECT_EQ(out[16], 21.0f + 2.0f);
  EXPECT_EQ(out[1], 2.0f);
}

// Scales: sub-block 0 sc 2 m 4, sub-block 1 sc 1 m 0, sub-block 5 sc 37 (0b10'0101) and
// m 50 (0b11'0010), split across byte 9 (low nibbles) and the top bits of bytes 1 and 5.
std::vector<std::byte> k_scales_block(std::size_t bytes) {
  std::vector<std::byte> block(bytes);
  set_half(block, 0, kHalfOne);   // d = 1
  set_half(block, 2, kHalfHalf);  // dmin = 0.5
  set(block, 4 + 0, 2);
  set(block, 4 + 4, 4);
  set(block, 4 + 1, 1 | (2 << 6));
  set(block, 4 + 5, 0 | (3 << 6));
  set(block, 4 + 9, 5 | (2 << 4));
  return block;
}

TEST(GgufDequantize, KQuantScalesAndMinimumsUnpack) {
  const auto block = k_scales_block(144);
  const auto* packed = reinterpret_cast<const std::uint8_t*>(block.data() + 4);
  std::uint8_t sc, m;
  k_quant_scale_min(packed, 0, sc, m);
  EXPECT_EQ(sc, 2);
  EXPECT_EQ(m, 4);
  k_quant_scale_min(packed, 1, sc, m);
  EXPECT_EQ(sc, 1);
  EXPECT_EQ(m, 0);
  k_quant_scale_min(packed, 5, sc, m);
  EXPECT_EQ(sc, 37);
  EXPECT_EQ(m, 50);
  k_quant_scale_min(packed, 4, sc, m);
  EXPECT_EQ(sc, 0);
  EXPECT_EQ(m, 0);
}

TEST(GgufDequantize, Q4_KIsScaleTimesNibbleMinusMinimum) {
  auto block = k_scales_block(144);
  set(block, 16 + 0, 0x3A);   // value 0 (sub 0): 10; value 32 (sub 1): 3
  set(block, 16 + 64, 0x70);  // value 128 (sub 4): 0; value 160 (sub 5): 7
  std::vector<float> out(256);
  ASSERT_TRUE(dequantize(TensorType::kQ4_K, block, out));
  EXPECT_EQ(out[0], 1 * 2 * 10 - 0.5f * 4);
  EXPECT_EQ(out[1], -2.0f);  // nibble 0 of sub-block 0: just the minimum
  EXPECT_EQ(out[32], 3.0f);
  EXPECT_EQ(out[128], 0.0f);
  EXPECT_EQ(out[160], 1 * 37 * 7 - 0.5f * 50);
}

TEST(GgufDequantize, Q5_KAddsTheHighBitFromQh) {
  auto block = k_scales_block(176);
  // qh at 16 (32 bytes), qs at 48. Bit 2p of qh[l] belongs to the first sub-block of pair p.
  set(block, 16 + 0, 0x01 | 0x20);  // value 0 (pair 0, first) and value 160 (pair 2, second)
  set(block, 16 + 1, 0x02);         // value 33 (pair 0, second)
  set(block, 48 + 0, 0x0A);         // value 0 low bits 10
  set(block, 48 + 1, 0x50);         // value 33 low bits 5
  set(block, 48 + 64, 0x70);        // value 160 low bits 7
  std::vector<float> out(256);
  ASSERT_TRUE(dequantize(TensorType::kQ5_K, block, out));
  EXPECT_EQ(out[0], 1 * 2 * 26 - 0.5f * 4);
  EXPECT_EQ(out[33], 1 * 1 * 21 - 0.0f);
  EXPECT_EQ(out[160], 1 * 37 * 23 - 0.5f * 50);
  EXPECT_EQ(out[32], 0.0f);
}

TEST(GgufDequantize, Q6_KIsScaleTimesSixBitsMinus32) {
  std::vector<std::byte> block(210);
  set_half(block, 208, kHalfQuarter);  // d = 0.25
  set(block, 192 + 0, 4);
  set(block, 192 + 2, -2);
  set(block, 192 + 4, 1);
  set(block, 192 + 9, 3);
  set(block, 0, 0x53);        // value 0 low 3, value 64 low 5
  set(block, 128 + 0, 0x12);  // value 0 high 2, value 64 high 1
  set(block, 64 + 16, 0x0F);  // second half, l 16: value 144 low 15
  set(block, 128 + 32 + 16, 0x03);
  std::vector<float> out(256);
  ASSERT_TRUE(dequantize(TensorType::kQ6_K, block, out));
  EXPECT_EQ(out[0], 0.25f * 4 * 3);
  EXPECT_EQ(out[1], 0.25f * 4 * -32);
  EXPECT_EQ(out[32], 0.25f * -2 * -32);
  EXPECT_EQ(out[64], 0.25f * 1 * -11);
  EXPECT_EQ(out[144], 0.25f * 3 * 31);
  EXPECT_EQ(out[16], 0.0f);  // scale 1 is 0
}

TEST(GgufDequantize, HalfTypesWidenAndWrongSizesAreRefused) {
  std::vector<std::byte> f16(4), bf16(4);
  set_half(f16, 0, kHalfTwo);
  set_half(f16, 2, 0xC000);   // -2
  set_half(bf16, 0, 0x3F80);  // 1
  set_half(bf16, 2, 0x4040);  // 3
  std::vector<float> out(2);
  ASSERT_TRUE(dequantize(TensorType::kF16, f16, out));
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(out[1], -2.0f);
  ASSERT_TRUE(dequantize(TensorType::kBF16, bf16, out));
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 3.0f);
  std::vector<std::byte> q8(34);
  std::vector<float> wrong(31);
  EXPECT_FALSE(dequantize(TensorType::kQ8_0, q8, wrong));
  std::vector<float> two_blocks(64);
  EXPECT_FALSE(dequantize(TensorType::kQ8_0, q8, two_blocks));
}

// The test writer's quantizers and the loader's dequantizers agree: the round trip's error
// is what the format's resolution allows.
TEST(GgufDequantize, WriterQuantizersRoundTripWithinTheFormatsResolution) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(1024);
  for (float& v : x)
    v = normal(rng);
  struct Case {
    TensorType type;
    double max_relative_rms;
  };
  for (const Case c :
       {Case{TensorType::kQ8_0, 0.01}, Case{TensorType::kQ6_K, 0.03}, Case{TensorType::kQ5_K, 0.06},
        Case{TensorType::kQ4_K, 0.12}, Case{TensorType::kQ4_0, 0.15}, Case{TensorType::kF16, 0.001},
        Case{TensorType::kBF16, 0.005}}) {
    const auto bytes = testing::quantize(c.type, x);
    std::vector<float> back(x.size());
    ASSERT_TRUE(dequantize(c.type, bytes, back)) << tensor_type_name(c.type);
    double err = 0, ref = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      err += (back[i] - x[i]) * (back[i] - x[i]);
      ref += x[i] * x[i];
    }
    const double relative = std::sqrt(err / ref);
    EXPECT_LT(relative, c.max_relative_rms) << tensor_type_name(c.type);
    EXPECT_GT(relative, 0.0) << tensor_type_name(c.type) << " lost nothing: suspicious";
  }
}

}  // namespace
}  // namespace weft::gguf
