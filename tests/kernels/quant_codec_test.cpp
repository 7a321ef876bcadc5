// The block quantization formats (kernels/cpu/quant/): names, sizes, exact byte layouts,
// Inferflow's Table 2 worked example, and round-trip error bounds for every format.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/quant/codec.hpp"
#include "kernels/cpu/quant/format.hpp"

namespace weft::quant {
namespace {

std::vector<std::byte> quantize(QuantType type, const std::vector<float>& w) {
  std::vector<std::byte> out(row_bytes(type, w.size()));
  quantize_row(type, w.data(), w.size(), out.data());
  return out;
}

std::vector<float> round_trip(QuantType type, const std::vector<float>& w) {
  const auto bytes = quantize(type, w);
  std::vector<float> out(w.size());
  dequantize_row(type, bytes.data(), w.size(), out.data());
  return out;
}

std::uint8_t byte_at(const std::vector<std::byte>& b, std::size_t i) {
  return static_cast<std::uint8_t>(b[i]);
}

TEST(QuantFormat, NamesSizesAndBitsPerWeight) {
  struct Expect {
    const char* name;
    int block;
    std::size_t block_bytes;
    double bits;
  };
  // Inferflow's Table 3 "actual bits/weight" row: 9 / 8.5, 6.5, 5.5, 5, 4.5, 4 (Q3H), 4 (Q3_B32).
  const Expect expect[] = {{"q8_b32", 32, 36, 9.0},  {"q8_b64", 64, 68, 8.5},
                           {"q6_b64", 64, 52, 6.5},  {"q5_b64", 64, 44, 5.5},
                           {"q4_b32", 32, 20, 5.0},  {"q4_b64", 64, 36, 4.5},
                           {"q3h_b64", 64, 32, 4.0}, {"q3_b32", 32, 16, 4.0},
                           {"q2_b32", 32, 12, 3.0},  {"q3h_b32", 32, 18, 4.5}};
  for (const auto& e : expect) {
    auto type = find_quant_type(e.name);
    ASSERT_TRUE(type) << e.name;
    const QuantInfo& info = quant_info(*type);
    EXPECT_EQ(info.name, e.name);
    EXPECT_EQ(info.block, e.block) << e.name;
    EXPECT_EQ(info.block_bytes(), e.block_bytes) << e.name;
    EXPECT_DOUBLE_EQ(info.bits_per_weight(), e.bits) << e.name;
  }
  EXPECT_DOUBLE_EQ(quant_info(QuantType::kQ3HB64).code_bits_per_weight(), 3.5);
  EXPECT_EQ(all_quant_types().size(), 14u);
  EXPECT_EQ(row_bytes(QuantType::kQ4B32, 384), 12u * 20u);
  EXPECT_EQ(row_bytes(QuantType::kQ4B64, 70), 2u * 36u);  // a partial block counts whole
}

TEST(QuantFormat, ParsesNamesAndAliasesAndListsSupportedOnError) {
  EXPECT_EQ(find_quant_type("Q4_B32"), QuantType::kQ4B32);
  EXPECT_EQ(find_quant_type("q4"), QuantType::kQ4B32);
  EXPECT_EQ(find_quant_type("q3h"), QuantType::kQ3HB64);
  EXPECT_EQ(find_quant_type("q6"), QuantType::kQ6B64);
  EXPECT_EQ(find_quant_type("q8"), QuantType::kQ8B32);
  EXPECT_FALSE(find_quant_type("q7_b32"));
  EXPECT_FALSE(find_quant_type(""));
  auto bad = parse_quant_type("q4_k");
  ASSERT_FALSE(bad);
  const std::string message = bad.error().what();
  EXPECT_NE(message.find("\"q4_k\""), std::string::npos) << message;
  EXPECT_NE(message.find("q4_b32"), std::string::npos) << message;
  EXPECT_NE(message.find("q3h_b64"), std::string::npos) << message;
  EXPECT_NE(message.find("q2_b64"), std::string::npos) << message;
}

// fp16 1.0 is 0x3c00, 0.0 is 0x0000; both little-endian at the head of the block.
void expect_header_scale1_min0(const std::vector<std::byte>& b, std::size_t at) {
  EXPECT_EQ(byte_at(b, at + 0), 0x00);
  EXPECT_EQ(byte_at(b, at + 1), 0x3c);
  EXPECT_EQ(byte_at(b, at + 2), 0x00);
  EXPECT_EQ(byte_at(b, at + 3), 0x00);
}

TEST(QuantLayout, Q4NibblesLowFirst) {
  std::vector<float> w(32);
  for (int i = 0; i < 32; ++i)
    w[i] = static_cast<float>(i % 16);  // min 0, max 15: scale 1, codes = values
  const auto b = quantize(QuantType::kQ4B32, w);
  ASSERT_EQ(b.size(), 20u);
  expect_header_scale1_min0(b, 0);
  for (int i = 0; i < 16; ++i) {
    const int lo = (2 * i) % 16, hi = (2 * i + 1) % 16;
    EXPECT_EQ(byte_at(b, 4 + i), lo | (hi << 4)) << i;
  }
}

TEST(QuantLayout, Q8OneByteEach) {
  std::vector<float> w(64);
  for (int i = 0; i < 64; ++i)
    w[i] = static_cast<float>(i * 4 % 256);  // 0..252: scale 1, codes = values
  w[1] = 255.0f;
  const auto b = quantize(QuantType::kQ8B64, w);
  ASSERT_EQ(b.size(), 68u);
  expect_header_scale1_min0(b, 0);
  for (int i = 0; i < 64; ++i)
    EXPECT_EQ(byte_at(b, 4 + i), static_cast<int>(w[i])) << i;
}

TEST(QuantLayout, Q3EightCodesInThreeBytes) {
  std::vector<float> w(32);
  for (int i = 0; i < 32; ++i)
    w[i] = static_cast<float>(i % 8);
  const auto b = quantize(QuantType::kQ3B32, w);
  ASSERT_EQ(b.size(), 16u);
  expect_header_scale1_min0(b, 0);
  // codes 0..7 least significant bit first: 0b11111010'11000110'10001000.
  for (int g = 0; g < 4; ++g) {
    EXPECT_EQ(byte_at(b, 4 + 3 * g + 0), 0x88);
    EXPECT_EQ(byte_at(b, 4 + 3 * g + 1), 0xc6);
    EXPECT_EQ(byte_at(b, 4 + 3 * g + 2), 0xfa);
  }
}

TEST(QuantLayout, Q3HPairsInSevenBits) {
  std::vector<float> w(32);
  for (int i = 0; i < 32; ++i)
    w[i] = static_cast<float>(i % 11);  // min 0, max 10: scale 1, codes = values
  const auto b = quantize(QuantType::kQ3HB32, w);
  ASSERT_EQ(b.size(), 18u);
  expect_header_scale1_min0(b, 0);
  // Pairs (0,1) (2,3) ... (14,15) mod 11 are 1, 25, 49, 73, 97, 110, 13, 37 (a * 11 + b),
  // eight 7-bit numbers in 7 bytes.
  const int first[7] = {0x81, 0x4c, 0x2c, 0x19, 0x76, 0x37, 0x4a};
  for (int i = 0; i < 7; ++i)
    EXPECT_EQ(byte_at(b, 4 + i), first[i]) << i;
  std::uint8_t codes[32];
  unpack_block_codes(QuantType::kQ3HB32, b.data(), codes);
  for (int i = 0; i < 32; ++i)
    EXPECT_EQ(codes[i], i % 11) << i;
}

TEST(QuantLayout, Q2FourCodesPerByte) {
  std::vector<float> w(32);
  for (int i = 0; i < 32; ++i)
    w[i] = static_cast<float>(3 - i % 4);
  const auto b = quantize(QuantType::kQ2B32, w);
  ASSERT_EQ(b.size(), 12u);
  expect_header_scale1_min0(b, 0);
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(byte_at(b, 4 + i), 3 | (2 << 2) | (1 << 4) | (0 << 6)) << i;
}

// Inferflow's Table 2: twelve weights in [-1, 1.5] at 4, 3 and 3.5 bits. The block is padded
// with zeros (inside the range, so min and max stay -1 and 1.5).
TEST(QuantLayout, InferflowTable2WorkedExample) {
  const float w[12] = {-1, -0.9f, -0.6f, -0.4f, -0.2f, 0, 0.1f, 0.5f, 0.7f, 1, 1.3f, 1.5f};
  struct Column {
    QuantType type;
    int q[12];
    float dequantized[12];
    double average_error;
  };
  const Column columns[] = {
      {QuantType::kQ4B32,
       {0, 1, 2, 4, 5, 6, 7, 9, 10, 12, 14, 15},
       {-1.000f, -0.833f, -0.667f, -0.333f, -0.167f, 0.000f, 0.167f, 0.500f, 0.667f, 1.000f, 1.333f,
        1.500f},
       0.031},
      {QuantType::kQ3B32,
       {0, 0, 1, 2, 2, 3, 3, 4, 5, 6, 6, 7},
       {-1.000f, -1.000f, -0.643f, -0.286f, -0.286f, 0.071f, 0.071f, 0.429f, 0.786f, 1.143f, 1.143f,
        1.500f},
       0.075},
      {QuantType::kQ3HB32,
       {0, 0, 2, 2, 3, 4, 4, 6, 7, 8, 9, 10},
       {-1.000f, -1.000f, -0.500f, -0.500f, -0.250f, 0.000f, 0.000f, 0.500f, 0.750f, 1.000f, 1.250f,
        1.500f},
       0.046},
  };
  for (const auto& c : columns) {
    std::vector<float> block(32, 0.0f);
    std::copy(w, w + 12, block.begin());
    const auto bytes = quantize(c.type, block);
    std::uint8_t codes[32];
    unpack_block_codes(c.type, bytes.data(), codes);
    std::vector<float> back(32);
    dequantize_row(c.type, bytes.data(), 32, back.data());
    double error = 0;
    for (int i = 0; i < 12; ++i) {
      EXPECT_EQ(codes[i], c.q[i]) << quant_info(c.type).name << " weight " << i;
      // The table rounds to 3 decimals; fp16 scale and min add < 1e-3.
      EXPECT_NEAR(back[i], c.dequantized[i], 2e-3) << quant_info(c.type).name << " weight " << i;
      error += std::fabs(back[i] - w[i]);
    }
    EXPECT_NEAR(error / 12, c.average_error, 1.5e-3) << quant_info(c.type).name;
  }
}

// Every weight comes back within half a step of the grid, plus what storing scale and min
// in fp16 costs (a relative 2^-11 on each, the scale's error growing along the grid).
TEST(QuantRoundTrip, ErrorWithinHalfAStepForEveryFormat) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (const std::size_t n : {std::size_t{1}, std::size_t{31}, std::size_t{64}, std::size_t{70},
                              std::size_t{200}, std::size_t{384}}) {
    std::vector<float> w(n);
    for (auto& v : w)
      v = normal(rng);
    if (n > 5) w[5] = 0.9f;  // an outlier in the first block
    for (const auto type : all_quant_types()) {
      const QuantInfo& info = quant_info(type);
      const auto back = round_trip(type, w);
      for (std::size_t begin = 0; begin < n; begin += info.block) {
        const std::size_t end = std::min(n, begin + info.block);
        float lo = w[begin], hi = w[begin];
        for (std::size_t i = begin; i < end; ++i) {
          lo = std::min(lo, w[i]);
          hi = std::max(hi, w[i]);
        }
        const float step = (hi - lo) / static_cast<float>(info.levels - 1);
        const float bound =
            step * (0.5f + static_cast<float>(info.levels) * 5e-4f) + std::fabs(lo) * 5e-4f + 1e-7f;
        for (std::size_t i = begin; i < end; ++i) {
          ASSERT_LE(std::fabs(back[i] - w[i]), bound)
              << info.name << " n=" << n << " i=" << i << " w=" << w[i];
        }
      }
    }
  }
}

TEST(QuantRoundTrip, MoreBitsMeanLessErrorAndQ3HSitsBetweenQ3AndQ4) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(64 * 256);
  for (auto& v : w)
    v = normal(rng);
  auto rms = [&](QuantType type) {
    const auto back = round_trip(type, w);
    double sum = 0;
    for (std::size_t i = 0; i < w.size(); ++i)
      sum += (back[i] - w[i]) * (back[i] - w[i]);
    return std::sqrt(sum / static_cast<double>(w.size()));
  };
  const QuantType by_bits[] = {QuantType::kQ8B64, QuantType::kQ6B64,  QuantType::kQ5B64,
                               QuantType::kQ4B64, QuantType::kQ3HB64, QuantType::kQ3B64,
                               QuantType::kQ2B64};
  for (std::size_t i = 1; i < std::size(by_bits); ++i) {
    EXPECT_LT(rms(by_bits[i - 1]), rms(by_bits[i]))
        << quant_info(by_bits[i - 1]).name << " vs " << quant_info(by_bits[i]).name;
  }
  // A smaller block fits its range tighter.
  EXPECT_LT(rms(QuantType::kQ4B32), rms(QuantType::kQ4B64));
  // Inferflow's point: Q3H at block 64 costs what Q3 at block 32 does (4 bits/weight) and
  // errs less.
  EXPECT_LT(rms(QuantType::kQ3HB64), rms(QuantType::kQ3B32));
}

TEST(QuantRoundTrip, ConstantBlockAndTailPadding) {
  std::vector<float> w(70, 0.3f);
  for (const auto type : all_quant_types()) {
    const auto bytes = quantize(type, w);
    std::vector<float> back(w.size());
    dequantize_row(type, bytes.data(), w.size(), back.data());
    for (std::size_t i = 0; i < w.size(); ++i)
      ASSERT_NEAR(back[i], 0.3f, 2e-4f) << quant_info(type).name;
  }
  // The tail block of a 70-weight q4_b64 row: codes past the 6 weights present are zero.
  std::vector<float> ramp(70);
  for (std::size_t i = 0; i < ramp.size(); ++i)
    ramp[i] = static_cast<float>(i);
  const auto bytes = quantize(QuantType::kQ4B64, ramp);
  std::uint8_t codes[64];
  unpack_block_codes(QuantType::kQ4B64, bytes.data() + 36, codes);
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[5], 15);
  for (int i = 6; i < 64; ++i)
    EXPECT_EQ(codes[i], 0) << i;
}

}  // namespace
}  // namespace weft::quant
