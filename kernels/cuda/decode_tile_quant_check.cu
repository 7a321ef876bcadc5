// convert_one_byte_elements (decode_tile_quant_check.hpp): one block of 64 threads, thread t
// holding bytes 4t .. 4t + 3 in one word, converted by the same calls the tile step makes.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "kernels/cuda/decode_tile_quant.cuh"
#include "kernels/cuda/decode_tile_quant_check.hpp"

namespace weft::cuda::detail {
namespace {

template <class T, class KV>
__global__ void convert_one_byte_kernel(std::uint16_t* out) {
  const unsigned t = threadIdx.x, u = t ^ 1u;
  const unsigned w0 = (4 * t) | ((4 * t + 1) << 8) | ((4 * t + 2) << 16) | ((4 * t + 3) << 24);
  const unsigned w1 = (4 * u) | ((4 * u + 1) << 8) | ((4 * u + 2) << 16) | ((4 * u + 3) << 24);
  // K: four bytes of one word (tile_attend_q's key fragments).
  const unsigned k = kv_word<T, KV>(w0);
  unsigned p0, p1;
  kv_pairs<T, KV>(k, k, 0, 1, 2, 3, p0, p1);
  out[4 * t] = p0 & 0xFFFFu;
  out[4 * t + 1] = p0 >> 16;
  out[4 * t + 2] = p1 & 0xFFFFu;
  out[4 * t + 3] = p1 >> 16;
  // V: byte j of two keys' words in one pair (tile_attend_q's value fragments).
  const unsigned a = kv_word<T, KV>(w0), b = kv_word<T, KV>(w1);
  for (int j = 0; j < 4; j += 2) {
    kv_pairs<T, KV>(a, b, j, 4 + j, j + 1, 5 + j, p0, p1);
    out[256 + 4 * t + j] = p0 & 0xFFFFu;
    out[512 + 4 * t + j] = p0 >> 16;
    out[256 + 4 * t + j + 1] = p1 & 0xFFFFu;
    out[512 + 4 * t + j + 1] = p1 >> 16;
  }
}

template <class T, class KV>
std::vector<std::uint16_t> run_conversion() {
  constexpr int kCount = 768;
  std::uint16_t* device = nullptr;
  if (cudaMalloc(&device, kCount * sizeof(std::uint16_t)) != cudaSuccess) return {};
  std::vector<std::uint16_t> host(kCount);
  convert_one_byte_kernel<T, KV><<<1, 64>>>(device);
  const bool ok = cudaGetLastError() == cudaSuccess &&
                  cudaMemcpy(host.data(), device, kCount * sizeof(std::uint16_t),
                             cudaMemcpyDeviceToHost) == cudaSuccess;
  cudaFree(device);
  if (!ok) return {};
  return host;
}

}  // namespace

std::vector<std::uint16_t> convert_one_byte_elements(KvDtype dtype, bool fp16) {
  if (dtype == KvDtype::kInt8)
    return fp16 ? run_conversion<__half, KvInt8>() : run_conversion<__nv_bfloat16, KvInt8>();
  if (dtype == KvDtype::kFp8E4M3)
    return fp16 ? run_conversion<__half, KvFp8>() : run_conversion<__nv_bfloat16, KvFp8>();
  return {};
}

}  // namespace weft::cuda::detail
