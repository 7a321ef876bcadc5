#include "loaders/gguf_dequantize.hpp"

#include <cstring>

#include "kernels/cpu/vector_math.hpp"

namespace weft::gguf {
namespace {

const std::uint8_t* u8(const std::byte* p) {
  return reinterpret_cast<const std::uint8_t*>(p);
}

float half_at(const std::byte* p) {
  std::uint16_t bits;
  std::memcpy(&bits, p, 2);  // little-endian, like every host Weft runs on
  return cpu::f16_to_f32(bits);
}

// Q4_K and Q5_K: 8 sub-blocks of 32 with 6-bit scales and minimums under two f16 super-block
// factors; value = d * scale * q - dmin * min. Sub-blocks pair up over 32 bytes of nibbles
// (low nibbles the first of the pair, high nibbles the second); Q5_K adds one high bit per
// value from qh, bit 2p of qh[l] for the first sub-block of pair p and bit 2p+1 for the second.
template <bool kFiveBit>
void dequantize_k_with_min(const std::byte* block, float* out) {
  const float d = half_at(block);
  const float dmin = half_at(block + 2);
  const std::uint8_t* scales = u8(block + 4);
  const std::uint8_t* qh = u8(block + 16);
  const std::uint8_t* qs = u8(block + (kFiveBit ? 16 + kSuperBlock / 8 : 16));
  for (int pair = 0; pair < 4; ++pair) {
    std::uint8_t sc0, m0, sc1, m1;
    k_quant_scale_min(scales, 2 * pair, sc0, m0);
    k_quant_scale_min(scales, 2 * pair + 1, sc1, m1);
    const float d0 = d * sc0, min0 = dmin * m0, d1 = d * sc1, min1 = dmin * m1;
    const std::uint8_t* q = qs + 32 * pair;
    float* y = out + 64 * pair;
    for (int l = 0; l < 32; ++l) {
      int lo = q[l] & 0xF;
      int hi = q[l] >> 4;
      if constexpr (kFiveBit) {
        lo += ((qh[l] >> (2 * pair)) & 1) << 4;
        hi += ((qh[l] >> (2 * pair + 1)) & 1) << 4;
      }
      y[l] = d0 * static_cast<float>(lo) - min0;
      y[32 + l] = d1 * static_cast<float>(hi) - min1;
    }
  }
}

}  // namespace

void k_quant_scale_min(const std::uint8_t* packed, int j, std::uint8_t& scale, std::uint8_t& min) {
  if (j < 4) {
    scale = packed[j] & 63;
    min = packed[j + 4] & 63;
  } else {
    scale = static_cast<std::uint8_t>((packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4));
    min = static_cast<std::uint8_t>((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4));
  }
}

// Q4_0: f16 scale, then 16 bytes; byte i holds value i (low nibble) and value i+16 (high),
// each stored offset by 8.
void dequantize_q4_0(const std::byte* block, float* out) {
  const float d = half_at(block);
  const std::uint8_t* q = u8(block + 2);
  for (int i = 0; i < 16; ++i) {
    out[i] = d * static_cast<float>((q[i] & 0xF) - 8);
    out[i + 16] = d * static_cast<float>((q[i] >> 4) - 8);
  }
}

// Q4_1: f16 scale and f16 minimum, then nibbles as Q4_0's, unsigned.
void dequantize_q4_1(const std::byte* block, float* out) {
  const float d = half_at(block);
  const float m = half_at(block + 2);
  const std::uint8_t* q = u8(block + 4);
  for (int i = 0; i < 16; ++i) {
    out[i] = d * static_cast<float>(q[i] & 0xF) + m;
    out[i + 16] = d * static_cast<float>(q[i] >> 4) + m;
  }
}

namespace {

// Q5_0 and Q5_1: nibbles as Q4_0's plus a 32-bit word of fifth bits, bit i for value i.
template <bool kWithMin>
void dequantize_q5(const std::byte* block, float* out) {
  const float d = half_at(block);
  const float m = kWithMin ? half_at(block + 2) : 0.0f;
  const std::byte* rest = block + (kWithMin ? 4 : 2);
  std::uint32_t qh;
  std::memcpy(&qh, rest, 4);
  const std::uint8_t* q = u8(rest + 4);
  const int offset = kWithMin ? 0 : 16;
  for (int i = 0; i < 16; ++i) {
    const int lo = (q[i] & 0xF) | static_cast<int>(((qh >> i) & 1u) << 4);
    const int hi = (q[i] >> 4) | static_cast<int>(((qh >> (i + 16)) & 1u) << 4);
    out[i] = d * static_cast<float>(lo - offset) + m;
    out[i + 16] = d * static_cast<float>(hi - offset) + m;
  }
}

}  // namespace

void dequantize_q5_0(const std::byte* block, float* out) {
  dequantize_q5<false>(block, out);
}

void dequantize_q5_1(const std::byte* block, float* out) {
  dequantize_q5<true>(block, out);
}

// Q8_0: f16 scale, then 32 signed bytes.
void dequantize_q8_0(const std::byte* block, float* out) {
  const float d = half_at(block);
  for (int i = 0; i < 32; ++i) {
    out[i] = d * static_cast<float>(static_cast<std::int8_t>(block[2 + i]));
  }
}

void dequantize_q4_k(const std::byte* block, float* out) {
  dequantize_k_with_min<false>(block, out);
}

void dequantize_q5_k(const std::byte* block, float* out) {
  dequantize_k_with_min<true>(block, out);
}

// Q6_K: ql[128] (low 4 bits), qh[64] (high 2 bits), 16 int8 scales, f16 d; value =
// d * scale * (q - 32). Each half of 128 values uses 64 bytes of ql and 32 of qh: value l of
// its four runs of 32 takes ql[l] low, ql[l+32] low, ql[l] high, ql[l+32] high nibbles and
// bits 0-1, 2-3, 4-5, 6-7 of qh[l]; a scale covers 16 values.
void dequantize_q6_k(const std::byte* block, float* out) {
  const std::uint8_t* ql = u8(block);
  const std::uint8_t* qh = u8(block + 128);
  const auto* scales = reinterpret_cast<const std::int8_t*>(block + 192);
  const float d = half_at(block + 208);
  for (int half = 0; half < 2; ++half) {
    const std::uint8_t* l4 = ql + 64 * half;
    const std::uint8_t* h2 = qh + 32 * half;
    const std::int8_t* sc = scales + 8 * half;
    float* y = out + 128 * half;
    for (int l = 0; l < 32; ++l) {
      const int s = l / 16;
      const int q0 = ((l4[l] & 0xF) | (((h2[l] >> 0) & 3) << 4)) - 32;
      const int q1 = ((l4[l + 32] & 0xF) | (((h2[l] >> 2) & 3) << 4)) - 32;
      const int q2 = ((l4[l] >> 4) | (((h2[l] >> 4) & 3) << 4)) - 32;
      const int q3 = ((l4[l + 32] >> 4) | (((h2[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[s] * q0);
      y[l + 32] = d * static_cast<float>(sc[s + 2] * q1);
      y[l + 64] = d * static_cast<float>(sc[s + 4] * q2);
      y[l + 96] = d * static_cast<float>(sc[s + 6] * q3);
    }
  }
}

bool dequantize(TensorType type, std::span<const std::byte> blocks, std::span<float> out) {
  const BlockGeometry g = block_geometry(type);
  if (out.size() % g.block_elements != 0) return false;
  const std::size_t count = out.size() / g.block_elements;
  if (blocks.size() != count * g.block_bytes) return false;
  const std::byte* src = blocks.data();
  float* dst = out.data();
  switch (type) {
    case TensorType::kF32:
      std::memcpy(dst, src, count * 4);
      return true;
    case TensorType::kF16:
      cpu::to_f32(DType::kF16, src, dst, count, cpu::KernelPath::kAuto);
      return true;
    case TensorType::kBF16:
      cpu::to_f32(DType::kBF16, src, dst, count, cpu::KernelPath::kAuto);
      return true;
    default:
      break;
  }
  void (*one)(const std::byte*, float*) = nullptr;
  switch (type) {
    case TensorType::kQ4_0:
      one = dequantize_q4_0;
      break;
    case TensorType::kQ4_1:
      one = dequantize_q4_1;
      break;
    case TensorType::kQ5_0:
      one = dequantize_q5_0;
      break;
    case TensorType::kQ5_1:
      one = dequantize_q5_1;
      break;
    case TensorType::kQ8_0:
      one = dequantize_q8_0;
      break;
    case TensorType::kQ4_K:
      one = dequantize_q4_k;
      break;
    case TensorType::kQ5_K:
      one = dequantize_q5_k;
      break;
    case TensorType::kQ6_K:
      one = dequantize_q6_k;
      break;
    default:
      return false;
  }
  for (std::size_t b = 0; b < count; ++b)
    one(src + b * g.block_bytes, dst + b * g.block_elements);
  return true;
}

}  // namespace weft::gguf
