#pragma once
// KV rows in the page element types (kernels/kv_dtype.hpp): storing one row of head_dim
// floats (quantizing it for int8 and fp8, with the row's own scale), reading it back, and the
// two products paged attention takes of a stored row (q . k and out += w * v) without
// widening the row into a buffer first. The CUDA kernels (kernels/cuda/paged_attention_quant)
// round the same way, so a page written on either reads the same on both.

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/vector_math.hpp"
#include "kernels/kv_dtype.hpp"

namespace weft::cpu {

// fp8 e4m3 as NVIDIA and OCP define it ("e4m3fn"): bias 7, no infinities, 0x7f/0xff NaN,
// largest finite 448. Round to nearest even; magnitudes above 448 saturate to 448 (as CUDA's
// __NV_SATFINITE does), NaN stays NaN.
std::uint8_t f32_to_fp8_e4m3(float value) noexcept;
float fp8_e4m3_to_f32(std::uint8_t bits) noexcept;

// Writes x[0..n) into dst in `dtype` and returns the row's scale: max|x| / kInt8KvMax or
// / kFp8E4M3Max for the quantized types (0 for a row of zeros), 1 for the float types.
// int8 elements are round-to-nearest-even(x / scale), clamped to [-127, 127].
float store_kv_row(KvDtype dtype, const float* x, std::size_t n, void* dst) noexcept;

// out[i] = scale * float(src[i]).
void load_kv_row(KvDtype dtype, const void* src, float scale, std::size_t n, float* out) noexcept;

// sum_i q[i] * scale * float(row[i]).
float dot_kv_row(const float* q, KvDtype dtype, const void* row, float scale, std::size_t n,
                 KernelPath path) noexcept;

// out[i] += alpha * scale * float(row[i]).
void axpy_kv_row(float alpha, KvDtype dtype, const void* row, float scale, float* out,
                 std::size_t n, KernelPath path) noexcept;

}  // namespace weft::cpu
