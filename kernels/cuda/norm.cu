#include <cstdint>
#include <cstring>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/norm.hpp"

namespace weft::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void add_norm_kernel(AddNormArgs a) {
  __shared__ float scratch[32];
  const std::size_t in_row =
      a.row_index != nullptr ? static_cast<std::size_t>(a.row_index[blockIdx.x]) : blockIdx.x;
  float* x = a.residual + in_row * a.n;
  const float* d = a.delta != nullptr ? a.delta + in_row * a.n : nullptr;
  // The summed row is recomputed on each pass (or read back once written) instead of held in
  // shared memory, so any hidden size works; the re-reads hit L1/L2.
  auto value = [&](int i) {
    float v = x[i];
    if (d != nullptr) v += d[i] + (a.delta_bias != nullptr ? a.delta_bias[i] : 0.0f);
    return v;
  };
  float sum = 0.0f;
  for (int i = threadIdx.x; i < a.n; i += blockDim.x) {
    const float v = value(i);
    sum += a.kind == NormKind::kRms ? v * v : v;
  }
  sum = detail::block_sum(sum, scratch);
  if (a.write_back && d != nullptr) {
    // Every thread has read its own elements above; the same thread writes them now.
    for (int i = threadIdx.x; i < a.n; i += blockDim.x)
      x[i] = value(i);
    d = nullptr;
  }
  auto summed = [&](int i) { return d != nullptr ? value(i) : x[i]; };
  float mean = 0.0f, inv = 0.0f;
  if (a.kind == NormKind::kRms) {
    inv = rsqrtf(sum / a.n + a.eps);
  } else {
    mean = sum / a.n;
    float var = 0.0f;
    for (int i = threadIdx.x; i < a.n; i += blockDim.x) {
      const float c = summed(i) - mean;
      var += c * c;
    }
    var = detail::block_sum(var, scratch);
    inv = rsqrtf(var / a.n + a.eps);
  }
  T* out = static_cast<T*>(a.out) + static_cast<std::size_t>(blockIdx.x) * a.n;
  for (int i = threadIdx.x; i < a.n; i += blockDim.x) {
    float y = (summed(i) - mean) * inv * a.weight[i];
    if (a.bias != nullptr) y += a.bias[i];
    out[i] = detail::from_float<T>(y);
  }
}

// The same for n a multiple of 4 up to 4 * kThreads * V: each thread holds its V float4 of the
// summed row in registers (one read of residual and delta, 16-byte loads).
template <class T, int V>
__global__ void __launch_bounds__(kThreads) add_norm_vec_kernel(AddNormArgs a) {
  __shared__ float scratch[32];
  const std::size_t in_row =
      a.row_index != nullptr ? static_cast<std::size_t>(a.row_index[blockIdx.x]) : blockIdx.x;
  const int n4 = a.n / 4;
  float4* x = reinterpret_cast<float4*>(a.residual + in_row * a.n);
  const float4* d =
      a.delta != nullptr ? reinterpret_cast<const float4*>(a.delta + in_row * a.n) : nullptr;
  const float4* db = reinterpret_cast<const float4*>(a.delta_bias);
  const bool rms = a.kind == NormKind::kRms;
  float4 v[V];
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i < n4) {
      float4 r = x[i];
      if (d != nullptr) {
        float4 e = d[i];
        if (db != nullptr) {
          const float4 b = db[i];
          e.x += b.x;
          e.y += b.y;
          e.z += b.z;
          e.w += b.w;
        }
        r.x += e.x;
        r.y += e.y;
        r.z += e.z;
        r.w += e.w;
      }
      v[k] = r;
      sum += rms ? r.x * r.x + r.y * r.y + r.z * r.z + r.w * r.w : r.x + r.y + r.z + r.w;
    }
  }
  sum = detail::block_sum(sum, scratch);
  if (a.write_back && d != nullptr) {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int i = threadIdx.x + k * kThreads;
      if (i < n4) x[i] = v[k];
    }
  }
  float mean = 0.0f, inv = 0.0f;
  if (rms) {
    inv = rsqrtf(sum / a.n + a.eps);
  } else {
    mean = sum / a.n;
    float var = 0.0f;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int i = threadIdx.x + k * kThreads;
      if (i < n4) {
        const float cx = v[k].x - mean, cy = v[k].y - mean, cz = v[k].z - mean, cw = v[k].w - mean;
        var += cx * cx + cy * cy + cz * cz + cw * cw;
      }
    }
    var = detail::block_sum(var, scratch);
    inv = rsqrtf(var / a.n + a.eps);
  }
  const float4* w4 = reinterpret_cast<const float4*>(a.weight);
  const float4* b4 = reinterpret_cast<const float4*>(a.bias);
  T* out = static_cast<T*>(a.out) + static_cast<std::size_t>(blockIdx.x) * a.n;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i < n4) {
      const float4 w = w4[i];
      float y0 = (v[k].x - mean) * inv * w.x, y1 = (v[k].y - mean) * inv * w.y,
            y2 = (v[k].z - mean) * inv * w.z, y3 = (v[k].w - mean) * inv * w.w;
      if (b4 != nullptr) {
        const float4 b = b4[i];
        y0 += b.x;
        y1 += b.y;
        y2 += b.z;
        y3 += b.w;
      }
      const T h[4] = {detail::from_float<T>(y0), detail::from_float<T>(y1),
                      detail::from_float<T>(y2), detail::from_float<T>(y3)};
      uint2 packed;
      memcpy(&packed, h, 8);
      *reinterpret_cast<uint2*>(out + 4 * i) = packed;
    }
  }
}

}  // namespace

void add_norm(const AddNormArgs& args, cudaStream_t stream) {
  if (args.rows == 0) return;
  auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  const int per_thread = (args.n / 4 + kThreads - 1) / kThreads;
  if (args.n % 4 == 0 && per_thread <= 8 && aligned(args.residual) && aligned(args.delta) &&
      aligned(args.delta_bias) && aligned(args.weight) && aligned(args.bias) && aligned(args.out)) {
    WEFT_DISPATCH_PRECISION(args.precision, {
      if (per_thread <= 1)
        add_norm_vec_kernel<T, 1><<<args.rows, kThreads, 0, stream>>>(args);
      else if (per_thread <= 2)
        add_norm_vec_kernel<T, 2><<<args.rows, kThreads, 0, stream>>>(args);
      else if (per_thread <= 4)
        add_norm_vec_kernel<T, 4><<<args.rows, kThreads, 0, stream>>>(args);
      else
        add_norm_vec_kernel<T, 8><<<args.rows, kThreads, 0, stream>>>(args);
    });
    return;
  }
  WEFT_DISPATCH_PRECISION(args.precision,
                          { add_norm_kernel<T><<<args.rows, kThreads, 0, stream>>>(args); });
}

}  // namespace weft::cuda
