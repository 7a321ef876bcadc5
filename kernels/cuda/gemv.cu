#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/activation.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/ll_exchange.cuh"

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
//
// `push` (null in gemv_kernel, so that its parameters stay what they were without pushes):
// ll_push.hpp; gemv_push_kernel.
template <class T, int kTokens, int kRows, int kUnroll, bool kGated>
__device__ __forceinline__ void gemv_body(const T* __restrict__ x, int tokens,
                                          const T* __restrict__ w, int out, int in,
                                          float* __restrict__ y, int ldy, ActivationKind kind,
                                          T* __restrict__ act, bool release, const LlPush* push) {
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
    float v[kRows][kTokens];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int t = 0; t < kTokens; ++t) {
        v[r][t] = detail::warp_sum(acc[r][t]);
        if (lane == 0 && t < tokens && row0 + r < out) {
          y[static_cast<std::size_t>(t) * static_cast<std::size_t>(ldy) + row0 + r] = v[r][t];
        }
      }
    }
    // The pushes (ll_push.hpp): rows (row0 + r, row0 + r + 1) of token t as a line flagged with
    // the next epoch of counter t, into each peer's area (out % 4 == 0: every row is real).
    if constexpr (kRows % 2 == 0) {
      if (push != nullptr && lane < kTokens && lane < tokens) {
        const int t = lane;
        const unsigned e = detail::ll_next_epoch(detail::ll_load_counter(push->epochs + t));
        const std::size_t at =
            detail::ll_row_bytes(push->ranks, push->rows, push->width, e & 1u, push->rank, t) +
            static_cast<std::size_t>(row0) * 8;
        float mine[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
#pragma unroll
          for (int k = 0; k < kTokens; ++k)
            if (k == t) mine[r] = v[r][k];
        }
        // Unrolled over every possible peer: a constant index keeps `push` in the parameter
        // space (a variable one copies the array to the stack, in every thread).
#pragma unroll
        for (int peer = 0; peer < kLlMaxRanks; ++peer) {
          if (peer >= push->ranks || peer == push->rank) continue;
          auto* dst = reinterpret_cast<uint4*>(push->area[peer] + at);
#pragma unroll
          for (int r = 0; r < kRows; r += 2)
            detail::ll_store_line(dst + r / 2, detail::ll_line(mine[r], mine[r + 1], e));
        }
      }
    }
  }
}

template <class T, int kTokens, int kRows, int kUnroll, bool kGated>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const T* __restrict__ x, int tokens, const T* __restrict__ w, int out, int in,
                float* __restrict__ y, int ldy, ActivationKind kind, T* __restrict__ act,
                bool release) {
  gemv_body<T, kTokens, kRows, kUnroll, kGated>(x, tokens, w, out, in, y, ldy, kind, act, release,
                                                nullptr);
}
// The product with its pushes (read in place: a __grid_constant__ parameter is not copied).
template <class T, int kTokens, int kRows, int kUnroll>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_push_kernel(const T* __restrict__ x, int tokens, const T* __restrict__ w, int out, int in,
                     float* __restrict__ y, int ldy, bool release,
                     const __grid_constant__ LlPush push) {
  gemv_body<T, kTokens, kRows, kUnroll, false>(x, tokens, w, out, in, y, ldy, ActivationKind::kSilu,
                                               nullptr, release, &push);
}

template <class T, int kTokens, int kRows, int kUnroll, bool kGated = false>
void launch(const void* x, int tokens, const void* w, int out, int in, float* y, int ldy,
            cudaStream_t stream, ActivationKind kind = ActivationKind::kSilu, void* act = nullptr,
            const LlPush* push = nullptr) {
  const int warps = kGated ? out / 2 : (out + kRows - 1) / kRows;
  const int blocks = (warps + kWarps - 1) / kWarps;
  const bool release =
      detail::release_early(kGated ? detail::kReleaseGemvGated : detail::kReleaseGemv);
  if constexpr (!kGated) {
    if (push != nullptr) {
      detail::launch_with(detail::pdl_products_enabled(),
                          gemv_push_kernel<T, kTokens, kRows, kUnroll>, blocks, kWarps * 32, 0,
                          stream, static_cast<const T*>(x), tokens, static_cast<const T*>(w), out,
                          in, y, ldy, detail::release_early(detail::kReleaseGemvPush), *push);
      return;
    }
  }
  detail::launch_with(detail::pdl_products_enabled(),
                      gemv_kernel<T, kTokens, kRows, kUnroll, kGated>, blocks, kWarps * 32, 0,
                      stream, static_cast<const T*>(x), tokens, static_cast<const T*>(w), out, in,
                      y, ldy, kind, static_cast<T*>(act), release);
}

}  // namespace

void gemv(const void* x, int tokens, const void* w, int out_features, int in_features, float* y,
          int ldy, Precision precision, cudaStream_t stream, const LlPush* push) {
  if (tokens <= 0 || out_features <= 0) return;
  const LlPush* p = push != nullptr && push->takes(tokens, out_features) ? push : nullptr;
  constexpr auto kAct = ActivationKind::kSilu;  // unused by the plain product
  WEFT_DISPATCH_PRECISION(precision, {
    if (tokens == 1) {
      launch<T, 1, 2, 4>(x, tokens, w, out_features, in_features, y, ldy, stream, kAct, nullptr, p);
    } else if (tokens == 2) {
      launch<T, 2, 2, 4>(x, tokens, w, out_features, in_features, y, ldy, stream, kAct, nullptr, p);
    } else if (tokens <= 4) {
      launch<T, 4, 4, 2>(x, tokens, w, out_features, in_features, y, ldy, stream, kAct, nullptr, p);
    } else {
      launch<T, 8, 4, 2>(x, tokens, w, out_features, in_features, y, ldy, stream, kAct, nullptr, p);
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
