#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/quant_gemv.cuh"
#include "kernels/cuda/quant_gemv_blocks.hpp"

namespace weft::cuda {
namespace {
namespace blocks {

constexpr int kWarps = 4;   // per thread block, one output row each
constexpr int kBlock = 32;  // weights per quantization block

// Code j of a block whose code bytes are the words c[] (least significant bits first).
template <int kBits>
__device__ __forceinline__ float code(const unsigned* c, int j) {
  constexpr int kPerWord = 32 / kBits;
  return static_cast<float>((c[j / kPerWord] >> (kBits * (j % kPerWord))) & ((1u << kBits) - 1));
}

// Lanes take blocks lane, lane + 32, ... of the row: a warp reads 32 consecutive blocks (640
// or 1152 bytes) per iteration, word by word, so every sector it touches is used whole.
template <class T, int kBits, int kTokens>
__global__ void __launch_bounds__(kWarps * 32)
    quant_gemv_kernel(const T* __restrict__ x, int tokens, const unsigned* __restrict__ w, int out,
                      int in, float* __restrict__ y, int ldy) {
  constexpr int kWords = 1 + kBlock * kBits / 32;  // header word, then the codes
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kWarps + static_cast<int>(threadIdx.x >> 5);
  if (row >= out) return;
  const int blocks = in / kBlock;
  const unsigned* wr = w + static_cast<std::size_t>(row) * blocks * kWords;
  const T* tag = nullptr;
  float acc[kTokens];
#pragma unroll
  for (int t = 0; t < kTokens; ++t)
    acc[t] = 0.0f;
  for (int b = lane; b < blocks; b += 32) {
    unsigned words[kWords];
#pragma unroll
    for (int i = 0; i < kWords; ++i)
      words[i] = __ldg(wr + static_cast<std::size_t>(b) * kWords + i);
    __half2 header;
    memcpy(&header, &words[0], sizeof(header));
    const float2 scale_min = __half22float2(header);  // .x scale, .y min
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      if (t >= tokens) break;
      const uint4* xb = reinterpret_cast<const uint4*>(x + static_cast<std::size_t>(t) * in +
                                                       static_cast<std::size_t>(b) * kBlock);
      float qx = 0.0f, sx = 0.0f;
#pragma unroll
      for (int chunk = 0; chunk < kBlock / 8; ++chunk) {
        float xf[8];
        quant_device::unpack(__ldg(xb + chunk), xf, tag);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          qx = fmaf(code<kBits>(words + 1, chunk * 8 + j), xf[j], qx);
          sx += xf[j];
        }
      }
      acc[t] = fmaf(scale_min.x, qx, fmaf(scale_min.y, sx, acc[t]));
    }
  }
#pragma unroll
  for (int t = 0; t < kTokens; ++t) {
    const float v = detail::warp_sum(acc[t]);
    if (lane == 0 && t < tokens) y[static_cast<std::size_t>(t) * ldy + row] = v;
  }
}

template <class T, int kBits, int kTokens>
void launch(const void* x, int tokens, const void* w, int out, int in, float* y, int ldy,
            cudaStream_t stream) {
  const int grid = (out + kWarps - 1) / kWarps;
  quant_gemv_kernel<T, kBits, kTokens><<<grid, kWarps * 32, 0, stream>>>(
      static_cast<const T*>(x), tokens, static_cast<const unsigned*>(w), out, in, y, ldy);
}

template <class T, int kBits>
void launch_tokens(const void* x, int tokens, const void* w, int out, int in, float* y, int ldy,
                   cudaStream_t stream) {
  if (tokens == 1) {
    launch<T, kBits, 1>(x, tokens, w, out, in, y, ldy, stream);
  } else if (tokens == 2) {
    launch<T, kBits, 2>(x, tokens, w, out, in, y, ldy, stream);
  } else if (tokens <= 4) {
    launch<T, kBits, 4>(x, tokens, w, out, in, y, ldy, stream);
  } else {
    launch<T, kBits, 8>(x, tokens, w, out, in, y, ldy, stream);
  }
}

}  // namespace blocks
}  // namespace

void quant_gemv_blocks(const void* x, int tokens, const void* w, QuantBlocksFormat format,
                       int out_features, int in_features, float* y, int ldy, Precision precision,
                       cudaStream_t stream) {
  if (tokens <= 0 || out_features <= 0) return;
  WEFT_DISPATCH_PRECISION(precision, {
    if (format == QuantBlocksFormat::kQ8B32) {
      blocks::launch_tokens<T, 8>(x, tokens, w, out_features, in_features, y, ldy, stream);
    } else {
      blocks::launch_tokens<T, 4>(x, tokens, w, out_features, in_features, y, ldy, stream);
    }
  });
}

}  // namespace weft::cuda
