#include "loaders/gguf_types.hpp"

#include <string>

namespace weft::gguf {

std::optional<TensorType> tensor_type_from_id(std::uint32_t id) noexcept {
  switch (id) {
    case 0:
    case 1:
    case 2:
    case 3:
    case 6:
    case 7:
    case 8:
    case 12:
    case 13:
    case 14:
    case 30:
      return static_cast<TensorType>(id);
    default:
      return std::nullopt;
  }
}

BlockGeometry block_geometry(TensorType type) noexcept {
  switch (type) {
    case TensorType::kF32:
      return {1, 4};
    case TensorType::kF16:
    case TensorType::kBF16:
      return {1, 2};
    case TensorType::kQ4_0:
      return {kBlock32, 2 + kBlock32 / 2};  // f16 scale, 32 nibbles
    case TensorType::kQ4_1:
      return {kBlock32, 2 + 2 + kBlock32 / 2};  // f16 scale and minimum, 32 nibbles
    case TensorType::kQ5_0:
      return {kBlock32, 2 + 4 + kBlock32 / 2};  // f16 scale, 32 fifth bits, 32 nibbles
    case TensorType::kQ5_1:
      return {kBlock32, 2 + 2 + 4 + kBlock32 / 2};
    case TensorType::kQ8_0:
      return {kBlock32, 2 + kBlock32};  // f16 scale, 32 int8
    case TensorType::kQ4_K:
      return {kSuperBlock, 2 + 2 + 12 + kSuperBlock / 2};  // d, dmin, scales, nibbles
    case TensorType::kQ5_K:
      return {kSuperBlock, 2 + 2 + 12 + kSuperBlock / 8 + kSuperBlock / 2};  // + high bits
    case TensorType::kQ6_K:
      return {kSuperBlock, kSuperBlock / 2 + kSuperBlock / 4 + kSuperBlock / 16 + 2};
  }
  return {1, 1};
}

std::string_view tensor_type_name(TensorType type) noexcept {
  switch (type) {
    case TensorType::kF32:
      return "F32";
    case TensorType::kF16:
      return "F16";
    case TensorType::kBF16:
      return "BF16";
    case TensorType::kQ4_0:
      return "Q4_0";
    case TensorType::kQ4_1:
      return "Q4_1";
    case TensorType::kQ5_0:
      return "Q5_0";
    case TensorType::kQ5_1:
      return "Q5_1";
    case TensorType::kQ8_0:
      return "Q8_0";
    case TensorType::kQ4_K:
      return "Q4_K";
    case TensorType::kQ5_K:
      return "Q5_K";
    case TensorType::kQ6_K:
      return "Q6_K";
  }
  return "?";
}

std::string ggml_type_name(std::uint32_t id) {
  // ggml's numbering (ids 4 and 5, the removed Q4_2/Q4_3, have no name).
  static constexpr const char* kNames[] = {
      "F32",     "F16",    "Q4_0",    "Q4_1",  "",       "",      "Q5_0",  "Q5_1",
      "Q8_0",    "Q8_1",   "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K",  "Q8_K",
      "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
      "I8",      "I16",    "I32",     "I64",   "F64",    "IQ1_M", "BF16",  "",
      "",        "",       "TQ1_0",   "TQ2_0", "",       "",      "",      "MXFP4"};
  if (id < std::size(kNames) && kNames[id][0] != '\0') {
    return std::string(kNames[id]) + " (type " + std::to_string(id) + ")";
  }
  return "type " + std::to_string(id);
}

std::string_view supported_tensor_types() noexcept {
  return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K";
}

}  // namespace weft::gguf
