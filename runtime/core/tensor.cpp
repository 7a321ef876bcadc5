#include "weft/tensor.hpp"

#include <array>

namespace weft {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::size_t size;
};

constexpr std::array<DTypeInfo, 9> kDTypes{{
    {DType::kF32, "F32", 4},
    {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},
    {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},
    {DType::kI32, "I32", 4},
    {DType::kI64, "I64", 8},
    {DType::kF64, "F64", 8},
    {DType::kBool, "BOOL", 1},
}};

}  // namespace

std::size_t dtype_size(DType dtype) noexcept {
  return kDTypes[static_cast<std::size_t>(dtype)].size;
}

std::string_view dtype_name(DType dtype) noexcept {
  return kDTypes[static_cast<std::size_t>(dtype)].name;
}

std::optional<DType> parse_dtype(std::string_view name) noexcept {
  for (const auto& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  return std::nullopt;
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::int64_t TensorView::numel() const noexcept {
  std::int64_t n = 1;
  for (auto d : shape)
    n *= d;
  return n;
}

TensorView make_f32_tensor(std::vector<std::int64_t> shape, std::vector<float> values) {
  auto storage = std::make_shared<std::vector<float>>(std::move(values));
  TensorView view;
  view.dtype = DType::kF32;
  view.shape = std::move(shape);
  view.data = reinterpret_cast<const std::byte*>(storage->data());
  view.owner = std::move(storage);
  return view;
}

}  // namespace weft
