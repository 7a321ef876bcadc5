#pragma once
// Element type conversion on the device: weights arrive as f32, f16 or bf16 and are stored in
// the model's precision; tests read 16-bit buffers back as fp32.

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cuda/precision.hpp"

namespace weft::cuda {

// dst[i] = (precision) src[i] for i < n, rounding to nearest even.
void convert_to_precision(const void* src, SourceType src_type, void* dst, Precision precision,
                          std::size_t n, cudaStream_t stream);

// dst[i] = (float) src[i] for a 16-bit src.
void convert_to_f32(const void* src, Precision precision, float* dst, std::size_t n,
                    cudaStream_t stream);

}  // namespace weft::cuda
