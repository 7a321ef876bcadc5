#pragma once
// Block quantization formats for weight matrices (Inferflow, seeds/000 section 3; layouts in
// docs/quantization.md). Every format is asymmetric min/max quantization per block of 32 or
// 64 weights of one row: a block stores two fp16 numbers, the step `scale` = (max - min) /
// (levels - 1) and `min`, then one code per weight (two per code for Q3H), and a weight is
// w' = min + q * scale. Rows are quantized independently, so a [rows, cols] matrix becomes a
// [rows, row_bytes(cols)] byte matrix and any row can be read alone.
//
// The names are the same in `weft quantize --format`, `--quantize`, config.json's
// "quantization" entry and the docs.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "weft/error.hpp"

namespace weft::quant {

enum class QuantType : std::uint8_t {
  kNone,  // not quantized: the matrix holds f32, f16 or bf16
  kQ8B32,
  kQ8B64,
  kQ6B32,
  kQ6B64,
  kQ5B32,
  kQ5B64,
  kQ4B32,
  kQ4B64,
  kQ3HB32,
  kQ3HB64,
  kQ3B32,
  kQ3B64,
  kQ2B32,
  kQ2B64,
};

struct QuantInfo {
  std::string_view name;     // "q4_b32"
  int block = 0;             // weights per block: 32 or 64
  int levels = 0;            // distinct values a weight takes: 2^bits, or 11 for Q3H
  int code_bits = 0;         // bits per stored code
  int weights_per_code = 1;  // 2 for Q3H (one 7-bit code holds two base-11 digits)
  // Bytes of one block: the two fp16 numbers, then block / weights_per_code codes packed
  // least significant bit first (8 codes fill exactly code_bits bytes).
  std::size_t block_bytes() const noexcept {
    return 4 + static_cast<std::size_t>(block / weights_per_code * code_bits / 8);
  }
  // Stored bits per weight, the fp16 scale and min included ("actual bits/weight" of
  // Inferflow's Table 3): 5.0 for q4_b32, 4.0 for q3h_b64.
  double bits_per_weight() const noexcept {
    return 8.0 * static_cast<double>(block_bytes()) / block;
  }
  // Inferflow's "quantization bits": log2(levels), 3.5 for Q3H.
  double code_bits_per_weight() const noexcept {
    return static_cast<double>(code_bits) / weights_per_code;
  }
};

// The format's numbers; kNone has an empty name and block 0.
const QuantInfo& quant_info(QuantType type) noexcept;

// Every format, in the order of the enum (largest first), kNone excluded.
std::span<const QuantType> all_quant_types() noexcept;

// "q8_b32, q8_b64, ..., q2_b64" for help texts and error messages.
std::string supported_quant_names();

// Parses a format name, case-insensitively. Besides the full names, Inferflow's short ones
// are accepted for the block size its Table 3 uses: q8 (b32), q6 (b64), q5 (b64), q4 (b32),
// q3h (b64), q3 (b32), q2 (b32). nullopt for anything else.
std::optional<QuantType> find_quant_type(std::string_view name) noexcept;
// The same, with an error that names the value and lists the supported names.
Result<QuantType> parse_quant_type(std::string_view name);

// Bytes of one quantized row of `cols` weights: ceil(cols / block) blocks. A last, partial
// block stores its codes for the weights present and zero codes after them.
std::size_t row_bytes(QuantType type, std::size_t cols) noexcept;

}  // namespace weft::quant
