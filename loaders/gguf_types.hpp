#pragma once
// The tensor types of GGUF files (ggml's `ggml_type` numbering) and their block geometry: a
// tensor row is a whole number of blocks, each holding `block_elements` values in
// `block_bytes` bytes. Only the types Weft can read are named; any other number is refused
// when the file is opened.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace weft::gguf {

enum class TensorType : std::uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

struct BlockGeometry {
  std::size_t block_elements;
  std::size_t block_bytes;
};

// Geometry of a supported type; nullopt for a type number Weft does not read.
std::optional<TensorType> tensor_type_from_id(std::uint32_t id) noexcept;
BlockGeometry block_geometry(TensorType type) noexcept;
// "Q4_K", as llama.cpp spells it.
std::string_view tensor_type_name(TensorType type) noexcept;
// ggml's name for any type number ("IQ2_XXS", ...), "type N" for a number it does not know:
// errors about unsupported types then say what the file holds.
std::string ggml_type_name(std::uint32_t id);
// "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K", for error messages.
std::string_view supported_tensor_types() noexcept;

// K-quant super-blocks hold 256 values; Q4_0 and Q8_0 blocks 32.
inline constexpr std::size_t kSuperBlock = 256;
inline constexpr std::size_t kBlock32 = 32;

}  // namespace weft::gguf
