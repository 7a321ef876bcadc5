#include "kernels/cpu/quant/format.hpp"

#include <array>
#include <cctype>

namespace weft::quant {
namespace {

constexpr QuantInfo kNoneInfo{};

// Indexed by QuantType - 1.
constexpr std::array<QuantInfo, 14> kInfos = {{
    {"q8_b32", 32, 256, 8, 1},
    {"q8_b64", 64, 256, 8, 1},
    {"q6_b32", 32, 64, 6, 1},
    {"q6_b64", 64, 64, 6, 1},
    {"q5_b32", 32, 32, 5, 1},
    {"q5_b64", 64, 32, 5, 1},
    {"q4_b32", 32, 16, 4, 1},
    {"q4_b64", 64, 16, 4, 1},
    {"q3h_b32", 32, 11, 7, 2},
    {"q3h_b64", 64, 11, 7, 2},
    {"q3_b32", 32, 8, 3, 1},
    {"q3_b64", 64, 8, 3, 1},
    {"q2_b32", 32, 4, 2, 1},
    {"q2_b64", 64, 4, 2, 1},
}};

constexpr std::array<QuantType, 14> kAll = {
    QuantType::kQ8B32, QuantType::kQ8B64, QuantType::kQ6B32, QuantType::kQ6B64,  QuantType::kQ5B32,
    QuantType::kQ5B64, QuantType::kQ4B32, QuantType::kQ4B64, QuantType::kQ3HB32, QuantType::kQ3HB64,
    QuantType::kQ3B32, QuantType::kQ3B64, QuantType::kQ2B32, QuantType::kQ2B64,
};

struct Alias {
  std::string_view name;
  QuantType type;
};
// Inferflow's short names, with the block size of its Table 3.
constexpr std::array<Alias, 7> kAliases = {{
    {"q8", QuantType::kQ8B32},
    {"q6", QuantType::kQ6B64},
    {"q5", QuantType::kQ5B64},
    {"q4", QuantType::kQ4B32},
    {"q3h", QuantType::kQ3HB64},
    {"q3", QuantType::kQ3B32},
    {"q2", QuantType::kQ2B32},
}};

}  // namespace

const QuantInfo& quant_info(QuantType type) noexcept {
  const auto index = static_cast<std::size_t>(type);
  if (index == 0 || index > kInfos.size()) return kNoneInfo;
  return kInfos[index - 1];
}

std::span<const QuantType> all_quant_types() noexcept {
  return kAll;
}

std::string supported_quant_names() {
  std::string out;
  for (const auto type : kAll) {
    if (!out.empty()) out += ", ";
    out += quant_info(type).name;
  }
  return out;
}

std::optional<QuantType> find_quant_type(std::string_view name) noexcept {
  std::string lower(name);
  for (auto& c : lower)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto type : kAll) {
    if (quant_info(type).name == lower) return type;
  }
  for (const auto& alias : kAliases) {
    if (alias.name == lower) return alias.type;
  }
  return std::nullopt;
}

Result<QuantType> parse_quant_type(std::string_view name) {
  if (auto type = find_quant_type(name)) return *type;
  return Error(ErrorCode::kInvalidArgument,
               "unknown quantization format \"" + std::string(name) + "\"; supported: " +
                   supported_quant_names() + " (or the short names q8, q6, q5, q4, q3h, q3, q2)");
}

std::size_t row_bytes(QuantType type, std::size_t cols) noexcept {
  const QuantInfo& info = quant_info(type);
  if (info.block == 0) return 0;
  const auto block = static_cast<std::size_t>(info.block);
  return (cols + block - 1) / block * info.block_bytes();
}

}  // namespace weft::quant
