#include "kernels/cpu/quant/codec.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/vector_math.hpp"

namespace weft::quant {
namespace {

constexpr float kF16Max = 65504.0f;

void store_u16(std::byte* p, std::uint16_t v) {
  p[0] = static_cast<std::byte>(v & 0xffu);
  p[1] = static_cast<std::byte>(v >> 8);
}
std::uint16_t load_u16(const std::byte* p) {
  return static_cast<std::uint16_t>(static_cast<unsigned>(p[0]) |
                                    (static_cast<unsigned>(p[1]) << 8));
}

// Units are what is stored: one code per weight, or for Q3H one 7-bit number per pair
// (first * 11 + second, Inferflow's equation 4). Eight units fill exactly code_bits bytes,
// least significant bit first.
void pack_units(const std::uint32_t* units, int count, int code_bits, std::byte* out) {
  for (int g = 0; g < count; g += 8) {
    std::uint64_t v = 0;
    for (int j = 0; j < 8; ++j)
      v |= static_cast<std::uint64_t>(units[g + j]) << (j * code_bits);
    for (int b = 0; b < code_bits; ++b)
      out[b] = static_cast<std::byte>((v >> (8 * b)) & 0xffu);
    out += code_bits;
  }
}

void unpack_units(const std::byte* in, int count, int code_bits, std::uint32_t* units) {
  const std::uint64_t mask = (std::uint64_t{1} << code_bits) - 1;
  for (int g = 0; g < count; g += 8) {
    std::uint64_t v = 0;
    for (int b = 0; b < code_bits; ++b)
      v |= static_cast<std::uint64_t>(in[b]) << (8 * b);
    for (int j = 0; j < 8; ++j)
      units[g + j] = static_cast<std::uint32_t>((v >> (j * code_bits)) & mask);
    in += code_bits;
  }
}

}  // namespace

BlockHeader read_block_header(const std::byte* block) noexcept {
  return {cpu::f16_to_f32(load_u16(block)), cpu::f16_to_f32(load_u16(block + 2))};
}

void quantize_row(QuantType type, const float* src, std::size_t n, std::byte* dst) {
  const QuantInfo& info = quant_info(type);
  const auto block = static_cast<std::size_t>(info.block);
  const int units_per_block = info.block / info.weights_per_code;
  std::uint32_t codes[64];
  std::uint32_t units[64];
  for (std::size_t begin = 0; begin < n; begin += block) {
    const std::size_t count = std::min(block, n - begin);
    const float* w = src + begin;
    float lo = w[0], hi = w[0];
    for (std::size_t i = 1; i < count; ++i) {
      lo = std::min(lo, w[i]);
      hi = std::max(hi, w[i]);
    }
    lo = std::clamp(lo, -kF16Max, kF16Max);
    const float step = std::min((hi - lo) / static_cast<float>(info.levels - 1), kF16Max);
    const std::uint16_t scale_bits = cpu::f32_to_f16(step);
    const std::uint16_t min_bits = cpu::f32_to_f16(lo);
    store_u16(dst, scale_bits);
    store_u16(dst + 2, min_bits);
    // Codes are rounded against the numbers the reader will see, not the exact ones.
    const float scale = cpu::f16_to_f32(scale_bits), min = cpu::f16_to_f32(min_bits);
    const float inverse = scale > 0.0f ? 1.0f / scale : 0.0f;
    const auto top = static_cast<float>(info.levels - 1);
    for (std::size_t i = 0; i < block; ++i) {
      if (i >= count || inverse == 0.0f) {
        codes[i] = 0;
        continue;
      }
      const float q = std::floor((w[i] - min) * inverse + 0.5f);
      codes[i] = q > 0.0f ? static_cast<std::uint32_t>(std::min(q, top)) : 0;  // NaN -> 0
    }
    if (info.weights_per_code == 2) {
      for (int u = 0; u < units_per_block; ++u)
        units[u] = codes[2 * u] * 11 + codes[2 * u + 1];
    } else {
      std::copy(codes, codes + block, units);
    }
    pack_units(units, units_per_block, info.code_bits, dst + 4);
    dst += info.block_bytes();
  }
}

void unpack_block_codes(QuantType type, const std::byte* block, std::uint8_t* codes) {
  const QuantInfo& info = quant_info(type);
  const int units_per_block = info.block / info.weights_per_code;
  std::uint32_t units[64];
  unpack_units(block + 4, units_per_block, info.code_bits, units);
  for (int u = 0; u < units_per_block; ++u) {
    if (info.weights_per_code == 2) {
      // Inferflow's equation 5.
      codes[2 * u] = static_cast<std::uint8_t>(units[u] / 11);
      codes[2 * u + 1] = static_cast<std::uint8_t>(units[u] % 11);
    } else {
      codes[u] = static_cast<std::uint8_t>(units[u]);
    }
  }
}

void dequantize_row(QuantType type, const std::byte* src, std::size_t n, float* dst) {
  const QuantInfo& info = quant_info(type);
  const auto block = static_cast<std::size_t>(info.block);
  std::uint8_t codes[64];
  for (std::size_t begin = 0; begin < n; begin += block) {
    const std::size_t count = std::min(block, n - begin);
    const BlockHeader h = read_block_header(src);
    unpack_block_codes(type, src, codes);
    for (std::size_t i = 0; i < count; ++i)
      dst[begin + i] = h.min + static_cast<float>(codes[i]) * h.scale;
    src += info.block_bytes();
  }
}

}  // namespace weft::quant
