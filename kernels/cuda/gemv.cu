#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/activation.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/gemv.hpp"

namespace weft::cuda {
namespace {

constexpr int kWarps = 4;  // per block

// Weights are read once: skip L1 so the activations (re-read by every warp) stay there.
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// Eight 16-bit values (the lower address in the low half of each word) as floats.
__device__ __forceinline__ void unpack(const uint4& v, float (&f)[8], const __nv_bfloat16*) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ void unpack(const uint4& v, float (&f)[8], const __half*) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __half2 h;
    static_assert(sizeof(h) == sizeof(unsigned));
    memcpy(&h, &w[i], sizeof(h));
    const float2 p = __half22float2(h);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

// One warp per kRows consecutive output rows; each lane takes 16-byte chunks lane, lane + 32,
// ... of the rows (kUnroll chunks of every row in flight), multiplies them with the same chunks
// of each token's x, and the warp sums its lanes at the end.
//
// kGated (kRows 2): the gated MLP's gate_up product ending in its activation. w is [2 * half,
// in] (gate rows, then up rows, half = out / 2); warp j takes rows j and half + j, and writes
// act[t, j] = activation(gate) * up rounded to T instead of the two sums: the arithmetic of
// mlp_activation (activation.cu) on the same sums, so the bits of the product and then the
// activation kernel, one launch less.
template <class T, int kTokens, int kRows, int kUnroll, bool kGated>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const T* __restrict__ x, int tokens, const T* __restrict__ w, int out, int in,
                float* __restrict__ y, int ldy, ActivationKind kind, T* __restrict__ act,
                bool release) {
  static_assert(!kGated || kRows == 2);
  const int lane = threadIdx.x & 31;
  const int warp_index = static_cast<int>(blockIdx.x * kWarps + (threadIdx.x >> 5));
  const int half = out / 2;
  const int row0 = kGated ? warp_index : warp_index * kRows;
  if (row0 >= (kGated ? half : out)) return;  // reads and writes nothing: no wait needed
  const int chunks = in >> 3;
  const uint4* wr[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int row = kGated ? row0 + r * half : min(row0 + r, out - 1);
    wr[r] = reinterpret_cast<const uint4*>(w + static_cast<std::size_t>(row) *
                                                   static_cast<std::size_t>(in));
  }
  const uint4* xr = reinterpret_cast<const uint4*>(x);
  const T* tag = nullptr;
  float acc[kRows][kTokens];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < kTokens; ++t)
      acc[r][t] = 0.0f;

  auto step = [&](const uint4(&wv)[kRows], int c) {
    float wf[kRows][8];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      unpack(wv[r], wf[r], tag);
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      if (t < tokens) {
        float xf[8];
        unpack(__ldg(xr + static_cast<std::size_t>(t) * chunks + c), xf, tag);
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int j = 0; j < 8; ++j)
            acc[r][t] = fmaf(wf[r][j], xf[j], acc[r][t]);
      }
    }
  };

  // Programmatic dependent launch: the first kUnroll chunks of the weights (constant) are
  // loaded before waiting on the kernel before, x only after; the sums are those of the loop.
  int c = lane;
  const bool preloaded = c + 32 * (kUnroll - 1) < chunks;
  uint4 first[kUnroll][kRows];
  if (preloaded) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        first[u][r] = load_stream(wr[r] + c + 32 * u);
  }
  detail::grid_dependency_wait_then_release(release);
  if (preloaded) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      step(first[u], c + 32 * u);
    c += 32 * kUnroll;
  }
  for (; c + 32 * (kUnroll - 1) < chunks; c += 32 * kUnroll) {
    uint4 wv[kUnroll][kRows];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        wv[u][r] = load_stream(wr[r] + c + 32 * u);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      step(wv[u], c + 32 * u);
  }
  for (; c < chunks; c += 32) {
    uint4 wv[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      wv[r] = load_stream(wr[r] + c);
    step(wv, c);
  }
  if constexpr (kGated) {
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      const float gate = detail::warp_sum(acc[0][t]), up = detail::warp_sum(acc[1][t]);
      if (lane == 0 && t < tokens) {
        act[static_cast<std::size_t>(t) * half + row0] =
            detail::from_float<T>(detail::activate(kind, gate) * up);
      }
    }
  } else {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int t = 0; t < kTokens; ++t) {
        const float v = detail::warp_sum(acc[r][t]);
        if (lane == 0 && t < tokens && row0 + r < out) {
          y[static_cast<std::size_t>(t) * static_cast<std::size_t>(ldy) + row0 + r] = v;
        }
      }
    }
  }
}

template <class T, int kTokens, int kRows, int kUnroll, bool kGated = false>
void launch(const void* x, int tokens, const void* w, int out, int in, float* y, int ldy,
            cudaStream_t stream, ActivationKind kind = ActivationKind::kSilu, void* act = nullptr) {
  const int warps = kGated ? out / 2 : (out + kRows - 1) / kRows;
  const int blocks = (warps + kWarps - 1) / kWarps;
  detail::launch_with(
      detail::pdl_products_enabled(), gemv_kernel<T, kTokens, kRows, kUnroll, kGated>, blocks,
      kWarps * 32, 0, stream, static_cast<const T*>(x), tokens, static_cast<const T*>(w), out, in,
      y, ldy, kind, static_cast<T*>(act), detail::release_early(detail::kReleaseGemv));
}

}  // namespace

void gemv(const void* x, int tokens, const void* w, int out_features, int in_features, float* y,
          int ldy, Precision precision, cudaStream_t stream) {
  if (tokens <= 0 || out_features <= 0) return;
  WEFT_DISPATCH_PRECISION(precision, {
    if (tokens == 1) {
      launch<T, 1, 2, 4>(x, tokens, w, out_features, in_features, y, ldy, stream);
    } else if (tokens == 2) {
      launch<T, 2, 2, 4>(x, tokens, w, out_features, in_features, y, ldy, stream);
    } else if (tokens <= 4) {
      launch<T, 4, 4, 2>(x, tokens, w, out_features, in_features, y, ldy, stream);
    } else {
      launch<T, 8, 4, 2>(x, tokens, w, out_features, in_features, y, ldy, stream);
    }
  });
}

bool gemv_gated_supported(const void* x, int tokens, const void* w, int out_features,
                          int in_features) {
  static const bool on = [] {
    const char* v = std::getenv("WEFT_GEMV_GATED");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on && out_features % 2 == 0 && out_features > 0 &&
         gemv_supported(x, tokens, w, in_features) && tokens <= kGemvGatedMaxTokens;
}

void gemv_gated(ActivationKind kind, const void* x, int tokens, const void* w, int out_features,
                int in_features, void* act, Precision precision, cudaStream_t stream) {
  if (tokens <= 0 || out_features <= 0) return;
  WEFT_DISPATCH_PRECISION(precision, {
    if (tokens == 1) {
      launch<T, 1, 2, 4, true>(x, tokens, w, out_features, in_features, nullptr, 0, stream, kind,
                               act);
    } else {
      launch<T, 2, 2, 4, true>(x, tokens, w, out_features, in_features, nullptr, 0, stream, kind,
                               act);
    }
  });
}

}  // namespace weft::cuda
