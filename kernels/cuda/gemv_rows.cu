#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/gemv_rows.hpp"

namespace weft::cuda {
namespace {

constexpr int kWarps = 4;  // per block; the block's 16 weight rows split over them by chunk
constexpr int kBlockRows = 16;
constexpr int kUnroll = 4;  // chunks per warp in flight

// Weights are read once: skip L1 so the x rows (read by every block) stay there.
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ void mma(float (&c)[4], unsigned a0, unsigned a1, unsigned a2,
                                    unsigned a3, unsigned b0, unsigned b1, __nv_bfloat16) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma(float (&c)[4], unsigned a0, unsigned a1, unsigned a2,
                                    unsigned a3, unsigned b0, unsigned b1, __half) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Lane (g = lane / 4, q = lane % 4) of a warp holds, for chunk c (elements [32c, 32c + 32)):
// weight rows g and g + 8 at elements 32c + 8q .. 32c + 8q + 7 (one 16-byte load each) and
// the same elements of x row g of each column tile. Within the chunk's two k16 products the
// k slots (2q, 2q + 1) and (2q + 8, 2q + 9) stand for elements 8q + (0, 1) and 8q + (2, 3),
// then 8q + (4, 5) and 8q + (6, 7): the same permutation on both sides, so each product is
// the chunk's dot product. Accumulator c[0..1] is weight row g with columns 2q, 2q + 1,
// c[2..3] row g + 8 with the same columns.
template <class T, int kTiles>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_rows_kernel(const T* __restrict__ x, int rows, const std::int32_t* __restrict__ row_index,
                     const T* __restrict__ w, int out, int in, float* __restrict__ y, int ldy,
                     bool release) {
  __shared__ float partial[kWarps][kTiles][32][4];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, q = lane & 3;
  const int row0 = blockIdx.x * kBlockRows;
  const int chunks = in >> 5;
  const uint4* wa =
      reinterpret_cast<const uint4*>(w + static_cast<std::size_t>(min(row0 + g, out - 1)) * in) + q;
  const uint4* wb = reinterpret_cast<const uint4*>(
                        w + static_cast<std::size_t>(min(row0 + g + 8, out - 1)) * in) +
                    q;
  // Programmatic dependent launch: the first kUnroll chunks of the weights (constant) are
  // loaded before waiting on the kernel before, x and row_index only after; the sums are
  // those of the loop below.
  int c = warp;
  const bool preloaded = c + kWarps * (kUnroll - 1) < chunks;
  uint4 first_a[kUnroll], first_b[kUnroll];
  if (preloaded) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      first_a[u] = load_stream(wa + 4 * (c + kWarps * u));
      first_b[u] = load_stream(wb + 4 * (c + kWarps * u));
    }
  }
  detail::grid_dependency_wait_then_release(release);
  // x row of column g of each tile (a zero column past `rows`).
  const uint4* xr[kTiles];
  bool live[kTiles];
#pragma unroll
  for (int n = 0; n < kTiles; ++n) {
    const int j = n * 8 + g;
    live[n] = j < rows;
    const int r = !live[n] ? 0 : row_index != nullptr ? row_index[j] : j;
    xr[n] = reinterpret_cast<const uint4*>(x + static_cast<std::size_t>(r) * in) + q;
  }
  float acc[kTiles][4];
#pragma unroll
  for (int n = 0; n < kTiles; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      acc[n][e] = 0.0f;

  auto step = [&](const uint4& a, const uint4& b, int c) {
#pragma unroll
    for (int n = 0; n < kTiles; ++n) {
      const uint4 xv = live[n] ? __ldg(xr[n] + 4 * c) : make_uint4(0, 0, 0, 0);
      mma(acc[n], a.x, b.x, a.y, b.y, xv.x, xv.y, T{});
      mma(acc[n], a.z, b.z, a.w, b.w, xv.z, xv.w, T{});
    }
  };
  if (preloaded) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      step(first_a[u], first_b[u], c + kWarps * u);
    c += kWarps * kUnroll;
  }
  for (; c + kWarps * (kUnroll - 1) < chunks; c += kWarps * kUnroll) {
    uint4 a[kUnroll], b[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      a[u] = load_stream(wa + 4 * (c + kWarps * u));
      b[u] = load_stream(wb + 4 * (c + kWarps * u));
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      step(a[u], b[u], c + kWarps * u);
  }
  for (; c < chunks; c += kWarps)
    step(load_stream(wa + 4 * c), load_stream(wb + 4 * c), c);

#pragma unroll
  for (int n = 0; n < kTiles; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      partial[warp][n][lane][e] = acc[n][e];
  __syncthreads();
  // Thread i adds element (tile, lane, e) = i, i + 128, ... over the warps in warp order.
  for (int i = threadIdx.x; i < kTiles * 32 * 4; i += kWarps * 32) {
    const int n = i / 128, l = (i / 4) % 32, e = i % 4;
    float v = partial[0][n][l][e];
#pragma unroll
    for (int k = 1; k < kWarps; ++k)
      v += partial[k][n][l][e];
    const int o = row0 + (l >> 2) + (e >= 2 ? 8 : 0);
    const int j = n * 8 + 2 * (l & 3) + (e & 1);
    if (o < out && j < rows) {
      const int r = row_index != nullptr ? row_index[j] : j;
      y[static_cast<std::size_t>(r) * static_cast<std::size_t>(ldy) + o] = v;
    }
  }
}

template <class T, int kTiles>
void launch(const void* x, int rows, const std::int32_t* row_index, const void* w, int out, int in,
            float* y, int ldy, cudaStream_t stream) {
  const int blocks = (out + kBlockRows - 1) / kBlockRows;
  detail::launch_with(detail::pdl_products_enabled(), gemv_rows_kernel<T, kTiles>, blocks,
                      kWarps * 32, 0, stream, static_cast<const T*>(x), rows, row_index,
                      static_cast<const T*>(w), out, in, y, ldy,
                      detail::release_early(detail::kReleaseGemv));
}

}  // namespace

void gemv_rows(const void* x, int rows, const std::int32_t* row_index, const void* w,
               int out_features, int in_features, float* y, int ldy, Precision precision,
               cudaStream_t stream) {
  if (rows <= 0 || out_features <= 0) return;
  WEFT_DISPATCH_PRECISION(precision, {
    if (rows <= 8) {
      launch<T, 1>(x, rows, row_index, w, out_features, in_features, y, ldy, stream);
    } else if (rows <= 16) {
      launch<T, 2>(x, rows, row_index, w, out_features, in_features, y, ldy, stream);
    } else if (rows <= 24) {
      launch<T, 3>(x, rows, row_index, w, out_features, in_features, y, ldy, stream);
    } else {
      launch<T, 4>(x, rows, row_index, w, out_features, in_features, y, ldy, stream);
    }
  });
}

}  // namespace weft::cuda
