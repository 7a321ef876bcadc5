#pragma once
// Element types of the CUDA backend. Weights, activations between kernels and KV pages are
// 16-bit (bf16 or fp16); every kernel accumulates in fp32. Plain C++: no CUDA headers.

#include <cstddef>

namespace weft::cuda {

// The 16-bit type a model runs in on the GPU.
enum class Precision { kBF16, kF16 };

// The element type of a host tensor being uploaded (what safetensors holds).
enum class SourceType { kF32, kF16, kBF16 };

inline constexpr std::size_t kHalfBytes = 2;  // both precisions are 2 bytes

inline const char* precision_name(Precision p) {
  return p == Precision::kBF16 ? "bf16" : "fp16";
}

}  // namespace weft::cuda
