// The GPU layout of quantized weights (kernels/cuda/quant_layout.hpp) and the kernels that read
// it (kernels/cuda/quant_gemv.hpp), for every block format:
// - the repacking, on the host (no GPU needed): every unit and header of the CPU format is
//   found where the layout says, and the alignment the kernels' vector loads need holds;
// - quant_gemv, every kernel (QuantGemvKernel: lanes, mma, stream, auto), 1 to 8 tokens, bf16 and
// fp16,
//   against the CPU reference dequantize_row then an fp64 product (row counts that are not
//   multiples of the kernels' tiles, columns that end in a partial tile or chunk, and matrices
//   tall enough that the mma kernel puts 2 and 4 tiles in a thread block and the stream
//   kernel's blocks walk several tiles; the mma and stream kernels' rows bitwise the same at
//   every token count), the choice of kernel by format and token count (no GPU needed), and
//   quant_dequantize against dequantize_row rounded to 16 bits, and quant_gemv_gated (the gate_up
//   product with its activation, every activation kind; mma and stream) against the fp64
//   reference.
// The GPU checks skip without a GPU.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/quant/codec.hpp"
#include "kernels/cpu/vector_math.hpp"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/quant_gemv.hpp"
#include "kernels/cuda/quant_layout.hpp"
#include "tests/kernels/cuda_quant_fixtures.hpp"
#include "tests/kernels/cuda_test_buffer.hpp"

namespace weft::cuda {
namespace {

using namespace quant_test;

TEST(CudaQuantLayout, FormatsMatchTheCpuTable) {
  for (QuantGemvFormat f : all_formats()) {
    const quant::QuantInfo& cpu = quant::quant_info(cpu_type(f));
    const QuantGemvInfo gpu = quant_gemv_info(f);
    EXPECT_EQ(gpu.block, cpu.block) << cpu.name;
    EXPECT_EQ(gpu.code_bits, cpu.code_bits) << cpu.name;
    EXPECT_EQ(gpu.unit_weights, cpu.weights_per_code) << cpu.name;
    int words = 0;
    for (int p = 0; quant_piece_width(gpu.code_bits, p) > 0; ++p)
      words += quant_piece_width(gpu.code_bits, p);
    EXPECT_EQ(words, gpu.code_bits) << cpu.name;
  }
}

// Every unit and header of random CPU rows is where the layout puts it; every word is written.
TEST(CudaQuantLayout, RepackKeepsEveryUnitAndHeader) {
  std::mt19937 rng(7);
  for (QuantGemvFormat f : all_formats()) {
    const quant::QuantType type = cpu_type(f);
    const quant::QuantInfo& info = quant::quant_info(type);
    const QuantGemvInfo gpu = quant_gemv_info(f);
    // 64 columns: one partial tile; 2112: two whole tiles of 1-weight units and a partial one.
    for (std::size_t cols : {std::size_t{64}, std::size_t{2112}, std::size_t{4096}}) {
      const std::size_t rows = 3, row_bytes = quant::row_bytes(type, cols);
      std::vector<std::uint8_t> cpu(rows * row_bytes);
      for (auto& b : cpu)
        b = static_cast<std::uint8_t>(rng());
      HostMatrix m = repack(f, cpu, rows, cols);
      const QuantMatrixLayout& l = m.layout;
      ASSERT_EQ(l.row_code_words % 4, 0u);
      ASSERT_EQ(l.header_offset() % 16, 0u);
      for (std::uint32_t w : m.words)
        ASSERT_NE(w, 0xdeadbeefu) << info.name << ": a word the repacking did not write";
      const std::size_t units_per_block =
          static_cast<std::size_t>(info.block / info.weights_per_code);
      for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t b = 0; b < l.row_blocks; ++b) {
          const std::uint8_t* block = cpu.data() + r * row_bytes + b * info.block_bytes();
          std::uint32_t header = 0;
          std::memcpy(&header, block, 4);
          ASSERT_EQ(m.headers()[r * l.row_blocks + b], header) << info.name;
          std::uint8_t codes[64];
          quant::unpack_block_codes(type, reinterpret_cast<const std::byte*>(block), codes);
          for (std::size_t u = 0; u < units_per_block; ++u) {
            // Unit u of the block is unit k of the row: bits k * code_bits of its group.
            const std::size_t k = b * units_per_block + u, group = k / 32;
            const std::size_t bit = (k % 32) * static_cast<std::size_t>(gpu.code_bits);
            const auto word = static_cast<int>(bit / 32);
            std::uint64_t two = m.codes()[quant_code_word_index(l, r, group, word)];
            if (word + 1 < gpu.code_bits) {
              two |= static_cast<std::uint64_t>(
                         m.codes()[quant_code_word_index(l, r, group, word + 1)])
                     << 32;
            }
            const auto unit =
                static_cast<unsigned>((two >> (bit % 32)) & ((1u << gpu.code_bits) - 1));
            if (gpu.unit_weights == 2) {
              ASSERT_EQ(unit / 11, codes[2 * u]) << info.name << " row " << r << " block " << b;
              ASSERT_EQ(unit % 11, codes[2 * u + 1]) << info.name;
            } else {
              ASSERT_EQ(unit, codes[u])
                  << info.name << " row " << r << " block " << b << " unit " << u;
            }
          }
        }
      }
      // The kernels' vector loads: a piece of w words of a group sits at a multiple of w words.
      for (std::size_t g = 0; g < l.row_groups; ++g) {
        int before = 0;
        for (int p = 0; quant_piece_width(gpu.code_bits, p) > 0; ++p) {
          const int w = quant_piece_width(gpu.code_bits, p);
          ASSERT_EQ(quant_code_word_index(l, 1, g, before) % static_cast<std::size_t>(w), 0u)
              << info.name;
          for (int j = 1; j < w; ++j) {
            ASSERT_EQ(quant_code_word_index(l, 1, g, before + j),
                      quant_code_word_index(l, 1, g, before) + static_cast<std::size_t>(j));
          }
          before += w;
        }
      }
    }
  }
}

TEST(CudaQuantLayout, OnlyMultiplesOf64Columns) {
  EXPECT_TRUE(quant_layout_supported(64));
  EXPECT_TRUE(quant_layout_supported(14336));
  EXPECT_FALSE(quant_layout_supported(0));
  EXPECT_FALSE(quant_layout_supported(96));
  EXPECT_FALSE(quant_layout_supported(4100));
}

// The kernel each request runs (quant_gemv_resolve; no GPU needed): auto takes dp4a for q4 and
// lanes for the others at 1-2 tokens, then stream for q4 and q8 and mma for the others; stream
// falls back to lanes, dp4a to what auto takes; lanes and mma stay themselves.
TEST(CudaQuantLayout, KernelChoiceByFormatAndTokens) {
  for (QuantGemvFormat f : all_formats()) {
    const bool stream = f == QuantGemvFormat::kQ4B32 || f == QuantGemvFormat::kQ4B64 ||
                        f == QuantGemvFormat::kQ8B32 || f == QuantGemvFormat::kQ8B64;
    EXPECT_EQ(quant_gemv_stream_supported(f), stream) << name_of(f);
    for (int tokens = 1; tokens <= kQuantGemvMaxTokens; ++tokens) {
      const QuantGemvKernel wide = stream ? QuantGemvKernel::kStream : QuantGemvKernel::kMma;
      const bool q4 = f == QuantGemvFormat::kQ4B32 || f == QuantGemvFormat::kQ4B64;
      EXPECT_EQ(quant_gemv_dp4a_supported(f, tokens), q4 && tokens <= 2) << name_of(f);
      const QuantGemvKernel small = q4 ? QuantGemvKernel::kDp4a : QuantGemvKernel::kLanes;
      EXPECT_EQ(quant_gemv_resolve(QuantGemvKernel::kAuto, f, tokens), tokens <= 2 ? small : wide)
          << name_of(f) << " tokens=" << tokens;
      EXPECT_EQ(quant_gemv_resolve(QuantGemvKernel::kDp4a, f, tokens),
                quant_gemv_resolve(QuantGemvKernel::kAuto, f, tokens))
          << name_of(f) << " tokens=" << tokens;
      EXPECT_EQ(quant_gemv_resolve(QuantGemvKernel::kStream, f, tokens),
                stream ? QuantGemvKernel::kStream : QuantGemvKernel::kLanes);
      EXPECT_EQ(quant_gemv_resolve(QuantGemvKernel::kLanes, f, tokens), QuantGemvKernel::kLanes);
      EXPECT_EQ(quant_gemv_resolve(QuantGemvKernel::kMma, f, tokens), QuantGemvKernel::kMma);
    }
  }
  QuantGemvKernel k = QuantGemvKernel::kLanes;
  for (const char* name : {"lanes", "mma", "stream", "dp4a", "auto"}) {
    ASSERT_TRUE(quant_gemv_kernel_from_name(name, k)) << name;
    EXPECT_STREQ(quant_gemv_kernel_name(k), name);
  }
  EXPECT_FALSE(quant_gemv_kernel_from_name("fast", k));
  // WEFT_QUANT_GEMV's values: one kernel, or one for 1-2 tokens and one for 3-8.
  QuantGemvKernel small = QuantGemvKernel::kAuto, large = QuantGemvKernel::kAuto;
  ASSERT_TRUE(quant_gemv_parse_kernels("lanes", small, large));
  EXPECT_EQ(small, QuantGemvKernel::kLanes);
  EXPECT_EQ(large, QuantGemvKernel::kLanes);
  ASSERT_TRUE(quant_gemv_parse_kernels("lanes/stream", small, large));
  EXPECT_EQ(small, QuantGemvKernel::kLanes);
  EXPECT_EQ(large, QuantGemvKernel::kStream);
  EXPECT_FALSE(quant_gemv_parse_kernels("lanes/", small, large));
  EXPECT_FALSE(quant_gemv_parse_kernels("/mma", small, large));
  EXPECT_FALSE(quant_gemv_parse_kernels("lanes/mma/stream", small, large));
  EXPECT_FALSE(quant_gemv_parse_kernels("", small, large));
}

struct Case {
  QuantGemvFormat format;
  Precision precision;
};

class CudaQuantGemv : public test_support::GpuTest<Case> {};

struct ProductCase {
  QuantGemvFormat format;
  Precision precision;
  QuantGemvKernel kernel;
};

class CudaQuantGemvProduct : public test_support::GpuTest<ProductCase> {};

TEST_P(CudaQuantGemvProduct, MatchesDequantizeThenProduct) {
  const auto [format, precision, kernel] = GetParam();
  std::mt19937 rng(3 + static_cast<int>(format));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto [tokens, rows, cols] : {std::tuple<int, int, int>{1, 1, 64},
                                    {1, 37, 4096},
                                    {1, 1000, 192},
                                    {2, 65, 1024},
                                    {3, 9, 2112},
                                    {4, 6, 128},
                                    {5, 130, 512},
                                    {6, 17, 320},
                                    {7, 33, 1088},
                                    {8, 67, 2112},
                                    {1, 3, 14336},
                                    {2, 34000, 64},
                                    {3, 17000, 256},
                                    // The stream kernel: blocks of several 4096-wide tiles (its
                                    // ring crossing tile ends), and warps with empty slices.
                                    {1, 5000, 4096},
                                    {5, 9000, 1088},
                                    {8, 600, 14336}}) {
    if (rows * static_cast<long long>(cols) > 4000000 &&
        !(kernel == QuantGemvKernel::kStream && quant_gemv_stream_supported(format))) {
      continue;
    }
    const Weights w = make_weights(format, rows, cols, rng);
    const auto [x16, x] =
        random_inputs(static_cast<std::size_t>(tokens) * cols, precision, rng, dist);
    auto* dx = upload(x16);
    auto* dw = upload(w.gpu.words);
    void* raw_y = nullptr;
    // y has a row stride larger than rows, as the fused products of the model write.
    const int ldy = rows + 3;
    ASSERT_EQ(cudaMalloc(&raw_y, sizeof(float) * tokens * ldy), cudaSuccess);
    ASSERT_EQ(cudaMemset(raw_y, 0xff, sizeof(float) * tokens * ldy), cudaSuccess);
    auto* dy = static_cast<float*>(raw_y);
    const QuantMatrixView view{dw, format, rows, cols};
    ASSERT_TRUE(quant_gemv_supported(dx, tokens, view));
    quant_gemv(kernel, dx, tokens, view, dy, ldy, precision, nullptr);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    std::vector<float> y(static_cast<std::size_t>(tokens) * ldy);
    ASSERT_EQ(cudaMemcpy(y.data(), dy, sizeof(float) * y.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dy);
    const bool rounded = quant_gemv_resolve(kernel, format, tokens) == QuantGemvKernel::kDp4a;
    for (int t = 0; t < tokens; ++t) {
      const float* xt = x.data() + static_cast<std::size_t>(t) * cols;
      for (int o = 0; o < rows; ++o) {
        double magnitude = 0;
        const double want = reference_dot(w, cols, o, xt, magnitude);
        const double rounding = rounded ? rounded_input_bound(format, w, cols, o, xt) : 0.0;
        ASSERT_NEAR(y[static_cast<std::size_t>(t) * ldy + o], want,
                    1e-5 * magnitude + 1e-6 + rounding)
            << name_of(format) << " " << quant_gemv_kernel_name(kernel) << " tokens=" << tokens
            << " rows=" << rows << " cols=" << cols << " t=" << t << " o=" << o;
      }
      // The columns between rows and ldy are not written.
      for (int o = rows; o < ldy; ++o) {
        std::uint32_t bits = 0;
        std::memcpy(&bits, &y[static_cast<std::size_t>(t) * ldy + o], 4);
        ASSERT_EQ(bits, 0xffffffffu) << name_of(format) << ": wrote past the rows";
      }
    }
  }
}

// dp4a rounds each group of 32 inputs on its own scale: groups of inputs from 1e-3 to 1e3 and
// all-zero groups (scale 0) stay within the bound of their own rounding, at 1 and 2 tokens.
TEST_P(CudaQuantGemv, Dp4aRoundsEachGroupOnItsOwnScale) {
  const auto [format, precision] = GetParam();
  if (!quant_gemv_dp4a_supported(format, 1)) GTEST_SKIP() << "dp4a has q4 formats only";
  std::mt19937 rng(13 + static_cast<int>(format));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int rows = 45, cols = 4160;  // 130 groups: a last tile of 2
  const Weights w = make_weights(format, rows, cols, rng);
  for (int tokens = 1; tokens <= 2; ++tokens) {
    std::vector<std::uint16_t> x16(static_cast<std::size_t>(tokens) * cols);
    std::vector<float> x(x16.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      const int group = static_cast<int>(i % cols) / 32 + static_cast<int>(i / cols);
      const float v = group % 9 == 4 ? 0.0f : dist(rng) * std::pow(10.0f, group % 7 - 3.0f);
      x16[i] = to16(precision, v);
      x[i] = from16(precision, x16[i]);
    }
    auto* dx = upload(x16);
    auto* dw = upload(w.gpu.words);
    void* raw_y = nullptr;
    ASSERT_EQ(cudaMalloc(&raw_y, sizeof(float) * tokens * rows), cudaSuccess);
    quant_gemv(QuantGemvKernel::kDp4a, dx, tokens, {dw, format, rows, cols},
               static_cast<float*>(raw_y), rows, precision, nullptr);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    std::vector<float> y(static_cast<std::size_t>(tokens) * rows);
    ASSERT_EQ(cudaMemcpy(y.data(), raw_y, sizeof(float) * y.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(raw_y);
    for (int t = 0; t < tokens; ++t) {
      const float* xt = x.data() + static_cast<std::size_t>(t) * cols;
      for (int o = 0; o < rows; ++o) {
        double magnitude = 0;
        const double want = reference_dot(w, cols, o, xt, magnitude);
        ASSERT_NEAR(y[static_cast<std::size_t>(t) * rows + o], want,
                    1e-5 * magnitude + rounded_input_bound(format, w, cols, o, xt))
            << name_of(format) << " tokens=" << tokens << " t=" << t << " o=" << o;
      }
    }
  }
}

// The dp4a product at 3-8 tokens on x rounded once (quant_round_inputs,
// quant_gemv_dp4a_rounded): each token's rows, plain and gated, are bitwise that token's
// 1-token dp4a product (which rounds x itself), so they keep its proven bound; q4_b32 and q4_b64
// at 3, 5 and 8 tokens over 130 groups (a last tile of 2).
TEST_P(CudaQuantGemv, Dp4aOnRoundedInputsIsBitwiseTheOneTokenProduct) {
  using test_support::DeviceArray;
  const auto [format, precision] = GetParam();
  if (!quant_gemv_dp4a_supported(format, 1)) GTEST_SKIP() << "dp4a has q4 formats only";
  std::mt19937 rng(29 + static_cast<int>(format));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int rows = 96, cols = 4160;
  const Weights w = make_weights(format, rows, cols, rng);
  const DeviceArray<std::uint32_t> dw(w.gpu.words);
  const QuantMatrixView view{dw.get(), format, rows, cols};
  const auto silu = ActivationKind::kSilu;
  for (int tokens : {3, 5, 8}) {
    const Inputs in = random_inputs(static_cast<std::size_t>(tokens) * cols, precision, rng, dist);
    const DeviceArray<std::uint16_t> dx(in.bits);
    DeviceArray<float> y(static_cast<std::size_t>(tokens) * rows);
    DeviceArray<std::uint16_t> act(static_cast<std::size_t>(tokens) * rows / 2);
    DeviceArray<std::uint8_t> rounded(quant_rounded_inputs_bytes(tokens, cols));
    quant_round_inputs(dx.get(), tokens, cols, rounded.get(), precision, nullptr);
    quant_gemv_dp4a_rounded(rounded.get(), tokens, view, y.get(), rows, -1, nullptr, precision,
                            nullptr);
    quant_gemv_dp4a_rounded(rounded.get(), tokens, view, nullptr, 0, static_cast<int>(silu),
                            act.get(), precision, nullptr);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    const std::vector<float> all = y.download();
    const std::vector<std::uint16_t> all_act = act.download();
    for (int t = 0; t < tokens; ++t) {
      const std::uint16_t* xt = dx.get() + static_cast<std::size_t>(t) * cols;
      DeviceArray<float> y1(rows);
      DeviceArray<std::uint16_t> act1(rows / 2);
      quant_gemv(QuantGemvKernel::kDp4a, xt, 1, view, y1.get(), rows, precision, nullptr);
      quant_gemv_gated(QuantGemvKernel::kDp4a, silu, xt, 1, view, act1.get(), precision, nullptr);
      const std::vector<float> one = y1.download();
      const std::vector<std::uint16_t> one_act = act1.download();
      for (int o = 0; o < rows; ++o) {
        ASSERT_EQ(std::memcmp(&one[o], &all[static_cast<std::size_t>(t) * rows + o], 4), 0)
            << name_of(format) << " tokens=" << tokens << " t=" << t << " o=" << o;
      }
      for (int o = 0; o < rows / 2; ++o) {
        ASSERT_EQ(one_act[o], all_act[static_cast<std::size_t>(t) * rows / 2 + o])
            << name_of(format) << " gated, tokens=" << tokens << " t=" << t << " o=" << o;
      }
    }
  }
}

double activate(ActivationKind kind, double v) {
  switch (kind) {
    case ActivationKind::kSilu:
      return v / (1.0 + std::exp(-v));
    case ActivationKind::kGelu:
      return 0.5 * v * (1.0 + std::erf(v * 0.70710678118654752));
    case ActivationKind::kGeluTanh:
      return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    case ActivationKind::kRelu:
      return v > 0 ? v : 0;
  }
  return v;
}

// The gated MLP's fused gate_up product with its activation (the mma kernel's epilogue):
// act(gate) * up against the fp64 reference, rounded once to 16 bits.
void check_gated(QuantGemvKernel kernel, QuantGemvFormat format, Precision precision);

TEST_P(CudaQuantGemv, GatedProductMatchesTheReference) {
  const auto [format, precision] = GetParam();
  for (const QuantGemvKernel kernel :
       {QuantGemvKernel::kMma, QuantGemvKernel::kStream, QuantGemvKernel::kDp4a}) {
    SCOPED_TRACE(quant_gemv_kernel_name(kernel));
    check_gated(kernel, format, precision);
  }
}

void check_gated(QuantGemvKernel kernel, QuantGemvFormat format, Precision precision) {
  std::mt19937 rng(5 + static_cast<int>(format));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  int case_index = 0;
  for (auto [tokens, width, cols] : {std::tuple<int, int, int>{1, 48, 320},
                                     {2, 16, 4096},
                                     {3, 32, 192},
                                     {4, 64, 1024},
                                     {5, 16, 64},
                                     {6, 48, 2112},
                                     {7, 32, 256},
                                     {8, 80, 512},
                                     // More tile pairs than the stream kernel's blocks.
                                     {1, 4400, 1088},
                                     {6, 4400, 256}}) {
    const auto kind = static_cast<ActivationKind>(case_index++ % 4);
    const int rows = 2 * width;
    const Weights w = make_weights(format, rows, cols, rng);
    const auto [x16, x] =
        random_inputs(static_cast<std::size_t>(tokens) * cols, precision, rng, dist);
    auto* dx = upload(x16);
    auto* dw = upload(w.gpu.words);
    void* raw = nullptr;
    const std::size_t n = static_cast<std::size_t>(tokens) * width;
    ASSERT_EQ(cudaMalloc(&raw, n * 2), cudaSuccess);
    quant_gemv_gated(kernel, kind, dx, tokens, {dw, format, rows, cols}, raw, precision, nullptr);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    std::vector<std::uint16_t> out(n);
    ASSERT_EQ(cudaMemcpy(out.data(), raw, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(raw);
    const double ulp = precision == Precision::kBF16 ? 1.0 / 128 : 1.0 / 1024;
    const bool rounded = quant_gemv_resolve(kernel, format, tokens) == QuantGemvKernel::kDp4a;
    for (int t = 0; t < tokens; ++t) {
      for (int i = 0; i < width; ++i) {
        double sums[2] = {0, 0}, magnitudes[2] = {0, 0}, rounding[2] = {0, 0};
        for (int half = 0; half < 2; ++half) {
          if (rounded) {
            rounding[half] = rounded_input_bound(format, w, cols, half * width + i,
                                                 x.data() + static_cast<std::size_t>(t) * cols);
          }
          const std::size_t row = static_cast<std::size_t>(half * width + i);
          for (int k = 0; k < cols; ++k) {
            const double p = static_cast<double>(x[static_cast<std::size_t>(t) * cols + k]) *
                             w.dequantized[row * cols + k];
            sums[half] += p;
            magnitudes[half] += std::fabs(p);
          }
        }
        const double a = activate(kind, sums[0]);
        const double want = a * sums[1];
        const std::uint16_t bits = out[static_cast<std::size_t>(t) * width + i];
        const double got = from16(precision, bits);
        // One rounding to 16 bits, and the sums' fp32 error (and dp4a's rounded inputs) through
        // act (slope <= 1.13).
        const double tolerance =
            ulp * std::fabs(want) +
            2e-5 * (magnitudes[0] * std::fabs(sums[1]) + std::fabs(a) * magnitudes[1]) +
            1.13 * rounding[0] * (std::fabs(sums[1]) + rounding[1]) + std::fabs(a) * rounding[1] +
            1e-6;
        ASSERT_NEAR(got, want, tolerance)
            << name_of(format) << " activation " << static_cast<int>(kind) << " tokens=" << tokens
            << " width=" << width << " cols=" << cols << " t=" << t << " i=" << i;
      }
    }
  }
}

TEST_P(CudaQuantGemv, DequantizeMatchesTheCpuReference) {
  const auto [format, precision] = GetParam();
  std::mt19937 rng(11 + static_cast<int>(format));
  for (auto [rows, cols, begin, count] :
       {std::tuple<int, int, int, int>{5, 64, 0, 5}, {40, 2112, 7, 30}, {9, 4096, 8, 1}}) {
    const Weights w = make_weights(format, rows, cols, rng);
    auto* dw = upload(w.gpu.words);
    void* raw = nullptr;
    const std::size_t n = static_cast<std::size_t>(count) * cols;
    ASSERT_EQ(cudaMalloc(&raw, n * 2), cudaSuccess);
    quant_dequantize({dw, format, rows, cols}, begin, count, raw, precision, nullptr);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    std::vector<std::uint16_t> out(n);
    ASSERT_EQ(cudaMemcpy(out.data(), raw, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(dw);
    cudaFree(raw);
    // One rounding to 16 bits of min + q * scale (which the GPU forms with one fma: the
    // rounded values may then differ by one unit in the last place).
    const double ulp = precision == Precision::kBF16 ? 1.0 / 128 : 1.0 / 1024;
    for (std::size_t i = 0; i < n; ++i) {
      const float want = w.dequantized[static_cast<std::size_t>(begin) * cols + i];
      const float got = from16(precision, out[i]);
      ASSERT_LE(std::fabs(got - want), ulp * std::fabs(want) + 1e-7)
          << name_of(format) << " rows=" << rows << " cols=" << cols << " element " << i;
    }
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (QuantGemvFormat f : all_formats()) {
    out.push_back({f, Precision::kBF16});
    out.push_back({f, Precision::kF16});
  }
  return out;
}

// The mma and stream kernels add each token's sums in the same order whatever the token count:
// a token's row is bitwise the same in a pass of 1 to 8 tokens (what batch-invariant decode
// needs).
TEST_P(CudaQuantGemvProduct, MmaTokenIsTheSameAtEveryTokenCount) {
  const auto [format, precision, kernel] = GetParam();
  if (kernel == QuantGemvKernel::kLanes || kernel == QuantGemvKernel::kAuto ||
      kernel == QuantGemvKernel::kDp4a) {
    GTEST_SKIP() << "the lanes and dp4a kernels (and auto, which picks by token count) are not "
                    "batch invariant";
  }
  if (kernel == QuantGemvKernel::kStream && !quant_gemv_stream_supported(format)) {
    GTEST_SKIP() << "stream runs lanes for this format";
  }
  std::mt19937 rng(7 + static_cast<int>(format));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  // Rows enough for the stream kernel's blocks to walk several tiles.
  const int rows = kernel == QuantGemvKernel::kStream ? 9000 : 100, cols = 2112;
  const int tokens = kQuantGemvMaxTokens;
  const Weights w = make_weights(format, rows, cols, rng);
  std::vector<std::uint16_t> x16(static_cast<std::size_t>(tokens) * cols);
  for (auto& v : x16) {
    const float f = dist(rng);
    v = to16(precision, f);
  }
  auto* dx = upload(x16);
  auto* dw = upload(w.gpu.words);
  void* raw_y = nullptr;
  ASSERT_EQ(cudaMalloc(&raw_y, sizeof(float) * tokens * rows), cudaSuccess);
  auto* dy = static_cast<float*>(raw_y);
  std::vector<std::vector<float>> results;
  for (int n = 1; n <= tokens; ++n) {
    quant_gemv(kernel, dx, n, {dw, format, rows, cols}, dy, rows, precision, nullptr);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    std::vector<float> y(static_cast<std::size_t>(n) * rows);
    ASSERT_EQ(cudaMemcpy(y.data(), dy, sizeof(float) * y.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    results.push_back(std::move(y));
  }
  cudaFree(dx);
  cudaFree(dw);
  cudaFree(dy);
  const std::vector<float>& all = results.back();
  for (int n = 1; n < tokens; ++n) {
    ASSERT_EQ(std::memcmp(results[n - 1].data(), all.data(), results[n - 1].size() * 4), 0)
        << name_of(format) << ": the first " << n << " token(s) differ from the 8-token pass";
  }
}

std::vector<ProductCase> product_cases() {
  std::vector<ProductCase> out;
  for (QuantGemvFormat f : all_formats()) {
    for (Precision p : {Precision::kBF16, Precision::kF16}) {
      for (QuantGemvKernel k :
           {QuantGemvKernel::kLanes, QuantGemvKernel::kMma, QuantGemvKernel::kStream,
            QuantGemvKernel::kDp4a, QuantGemvKernel::kAuto})
        out.push_back({f, p, k});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaQuantGemvProduct, ::testing::ValuesIn(product_cases()),
                         [](const ::testing::TestParamInfo<ProductCase>& p) {
                           return name_of(p.param.format) + "_" +
                                  precision_name(p.param.precision) + "_" +
                                  quant_gemv_kernel_name(p.param.kernel);
                         });

INSTANTIATE_TEST_SUITE_P(Formats, CudaQuantGemv, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& p) {
                           return name_of(p.param.format) + "_" + precision_name(p.param.precision);
                         });

}  // namespace
}  // namespace weft::cuda
