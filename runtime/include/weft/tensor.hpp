#pragma once
// A small tensor: dtype, shape, data and an owner that keeps the bytes alive (an mmap of a
// weights file, a heap buffer, later a device buffer or a pool page). No autograd, no strides:
// every tensor Weft hands around is dense and row-major, which is what safetensors stores.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

enum class DType : std::uint8_t { kF32, kF16, kBF16, kI8, kU8, kI32, kI64, kF64, kBool };

// Bytes per element.
std::size_t dtype_size(DType dtype) noexcept;
// The safetensors spelling: "F32", "F16", "BF16", "I8", "U8", "I32", "I64", "F64", "BOOL".
std::string_view dtype_name(DType dtype) noexcept;
// Parses the safetensors spelling; nullopt for anything else.
std::optional<DType> parse_dtype(std::string_view name) noexcept;

// "[4, 64]" for error messages.
std::string shape_string(const std::vector<std::int64_t>& shape);

enum class Device : std::uint8_t { kCpu, kCuda };

// A non-owning view plus a shared owner. Copying a TensorView is cheap and keeps the owner
// alive, so a view outlives the loader that made it.
struct TensorView {
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  const std::byte* data = nullptr;
  Device device = Device::kCpu;
  std::shared_ptr<const void> owner;

  std::int64_t numel() const noexcept;
  std::size_t nbytes() const noexcept {
    return static_cast<std::size_t>(numel()) * dtype_size(dtype);
  }
  std::size_t rank() const noexcept { return shape.size(); }
  template <class T>
  const T* as() const noexcept {
    return reinterpret_cast<const T*>(data);
  }
};

// A heap-owned f32 tensor, for activations and tests.
TensorView make_f32_tensor(std::vector<std::int64_t> shape, std::vector<float> values);

}  // namespace weft
