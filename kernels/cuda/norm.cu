#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/norm.hpp"

namespace weft::cuda {
namespace {

constexpr int kThreads = 256;
// Rows that add_norm_vec_kernel does not take, up to kThreads * kItems wide (4096: Llama-3-8B's
// hidden size) take the register path: each thread loads all its elements (and their weights)
// before the first use, so one row costs about one memory latency per pass instead of one per
// element. Each thread owns the same elements, summed in the same order, as in the generic loop, so
// the results are bitwise the same.
constexpr int kItems = 16;
static_assert(kThreads * kItems == 4096, "add_norm_delta16_exact (norm.hpp) names this width");

// Element `at` of the delta: fp32, or 16-bit (delta16, in T) widened exactly.
template <class T>
__device__ __forceinline__ float delta_at(const AddNormArgs& a, std::size_t at) {
  return a.delta16 != nullptr ? detail::to_float(static_cast<const T*>(a.delta16)[at])
                              : a.delta[at];
}

template <class T>
__global__ void add_norm_kernel(AddNormArgs a, bool release) {
  __shared__ float scratch[32];
  detail::grid_dependency_wait_then_release(release);
  const std::size_t in_row =
      a.row_index != nullptr ? static_cast<std::size_t>(a.row_index[blockIdx.x]) : blockIdx.x;
  float* x = a.residual + in_row * a.n;
  bool d = a.delta != nullptr || a.delta16 != nullptr;
  // The summed row is recomputed on each pass (or read back once written) instead of held in
  // shared memory, so any hidden size works; the re-reads hit L1/L2.
  auto value = [&](int i) {
    float v = x[i];
    if (d)
      v += delta_at<T>(a, in_row * a.n + i) + (a.delta_bias != nullptr ? a.delta_bias[i] : 0.0f);
    return v;
  };
  float sum = 0.0f;
  for (int i = threadIdx.x; i < a.n; i += blockDim.x) {
    const float v = value(i);
    sum += a.kind == NormKind::kRms ? v * v : v;
  }
  sum = detail::block_sum(sum, scratch);
  if (a.write_back && d) {
    // Every thread has read its own elements above; the same thread writes them now.
    for (int i = threadIdx.x; i < a.n; i += blockDim.x)
      x[i] = value(i);
    d = false;
  }
  auto summed = [&](int i) { return d ? value(i) : x[i]; };
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

// The same arithmetic as add_norm_kernel (launched with kThreads threads) with every element
// of the thread held in registers: element k of thread t is t + k * kThreads.
template <class T>
__global__ void __launch_bounds__(kThreads) add_norm_regs_kernel(AddNormArgs a, bool release) {
  __shared__ float scratch[32];
  detail::grid_dependency_wait_then_release(release);
  const std::size_t in_row =
      a.row_index != nullptr ? static_cast<std::size_t>(a.row_index[blockIdx.x]) : blockIdx.x;
  float* x = a.residual + in_row * a.n;
  const bool d = a.delta != nullptr || a.delta16 != nullptr;
  const int t = threadIdx.x;
  float v[kItems], w[kItems];
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int i = t + k * kThreads;
    v[k] = i < a.n ? x[i] : 0.0f;
  }
  if (d) {
    float dv[kItems];
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int i = t + k * kThreads;
      dv[k] = i < a.n ? delta_at<T>(a, in_row * a.n + i) : 0.0f;
    }
    if (a.delta_bias != nullptr) {
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        const int i = t + k * kThreads;
        if (i < a.n) dv[k] += a.delta_bias[i];
      }
    } else {
#pragma unroll
      for (int k = 0; k < kItems; ++k)
        dv[k] += 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kItems; ++k)
      v[k] += dv[k];
  }
  // The weights do not depend on the sum: start their loads before the reduction.
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int i = t + k * kThreads;
    w[k] = i < a.n ? a.weight[i] : 0.0f;
  }
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    if (t + k * kThreads < a.n) sum += a.kind == NormKind::kRms ? v[k] * v[k] : v[k];
  }
  sum = detail::block_sum(sum, scratch);
  if (a.write_back && d) {
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int i = t + k * kThreads;
      if (i < a.n) x[i] = v[k];
    }
  }
  float mean = 0.0f, inv = 0.0f;
  if (a.kind == NormKind::kRms) {
    inv = rsqrtf(sum / a.n + a.eps);
  } else {
    mean = sum / a.n;
    float var = 0.0f;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      if (t + k * kThreads < a.n) {
        const float c = v[k] - mean;
        var += c * c;
      }
    }
    var = detail::block_sum(var, scratch);
    inv = rsqrtf(var / a.n + a.eps);
  }
  T* out = static_cast<T*>(a.out) + static_cast<std::size_t>(blockIdx.x) * a.n;
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int i = t + k * kThreads;
    if (i < a.n) {
      float y = (v[k] - mean) * inv * w[k];
      if (a.bias != nullptr) y += a.bias[i];
      out[i] = detail::from_float<T>(y);
    }
  }
}

// Rows of n = 4 * threads (n % 128 == 0, up to 4096) with 16-byte aligned rows: one float4 of
// every operand per thread, so each thread issues one load per operand. Thread t owns
// elements 4t..4t+3 and sums them in order before the block reduction (a different order
// from add_norm_kernel's, the same for every row and batch).
template <class T>
__global__ void __launch_bounds__(1024) add_norm_vec_kernel(AddNormArgs a, bool release) {
  __shared__ float scratch[32];
  const int i = 4 * threadIdx.x;
  // The weight is constant: its load may overlap the previous kernel's tail.
  const float4 w = *reinterpret_cast<const float4*>(a.weight + i);
  detail::grid_dependency_wait_then_release(release);
  const std::size_t in_row =
      a.row_index != nullptr ? static_cast<std::size_t>(a.row_index[blockIdx.x]) : blockIdx.x;
  float4* x = reinterpret_cast<float4*>(a.residual + in_row * a.n + i);
  float4 v = *x;
  const bool d = a.delta != nullptr || a.delta16 != nullptr;
  if (d) {
    float4 dv;
    if (a.delta16 != nullptr) {
      const uint2 raw =
          *reinterpret_cast<const uint2*>(static_cast<const T*>(a.delta16) + in_row * a.n + i);
      T h[4];
      memcpy(h, &raw, sizeof raw);
      dv = make_float4(detail::to_float(h[0]), detail::to_float(h[1]), detail::to_float(h[2]),
                       detail::to_float(h[3]));
    } else {
      dv = *reinterpret_cast<const float4*>(a.delta + in_row * a.n + i);
    }
    if (a.delta_bias != nullptr) {
      const float4 b = *reinterpret_cast<const float4*>(a.delta_bias + i);
      dv.x += b.x, dv.y += b.y, dv.z += b.z, dv.w += b.w;
    }
    v.x += dv.x, v.y += dv.y, v.z += dv.z, v.w += dv.w;
  }
  float sum;
  if (a.kind == NormKind::kRms) {
    sum = v.x * v.x;
    sum += v.y * v.y;
    sum += v.z * v.z;
    sum += v.w * v.w;
  } else {
    sum = v.x + v.y + v.z + v.w;
  }
  sum = detail::block_sum(sum, scratch);
  if (a.write_back && d) *x = v;
  float mean = 0.0f, inv = 0.0f;
  if (a.kind == NormKind::kRms) {
    inv = rsqrtf(sum / a.n + a.eps);
  } else {
    mean = sum / a.n;
    const float c0 = v.x - mean, c1 = v.y - mean, c2 = v.z - mean, c3 = v.w - mean;
    float var = c0 * c0;
    var += c1 * c1;
    var += c2 * c2;
    var += c3 * c3;
    var = detail::block_sum(var, scratch);
    inv = rsqrtf(var / a.n + a.eps);
  }
  float y[4] = {(v.x - mean) * inv * w.x, (v.y - mean) * inv * w.y, (v.z - mean) * inv * w.z,
                (v.w - mean) * inv * w.w};
  if (a.bias != nullptr) {
    const float4 b = *reinterpret_cast<const float4*>(a.bias + i);
    y[0] += b.x, y[1] += b.y, y[2] += b.z, y[3] += b.w;
  }
  T* out = static_cast<T*>(a.out) + static_cast<std::size_t>(blockIdx.x) * a.n + i;
#pragma unroll
  for (int k = 0; k < 4; ++k)
    out[k] = detail::from_float<T>(y[k]);
}

bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15) == 0;
}
bool aligned8(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 7) == 0;
}

}  // namespace

void add_norm(const AddNormArgs& args, cudaStream_t stream) {
  if (args.rows == 0) return;
  const bool release = detail::release_early(detail::kReleaseAddNorm);
  if (args.n % 128 == 0 && args.n <= 4096 && aligned16(args.residual) && aligned16(args.delta) &&
      aligned8(args.delta16) && aligned16(args.delta_bias) && aligned16(args.weight) &&
      aligned16(args.bias) && aligned16(args.out)) {
    WEFT_DISPATCH_PRECISION(args.precision, {
      detail::launch(add_norm_vec_kernel<T>, args.rows, args.n / 4, 0, stream, args, release);
    });
    return;
  }
  if (args.n <= kThreads * kItems) {
    WEFT_DISPATCH_PRECISION(args.precision, {
      detail::launch(add_norm_regs_kernel<T>, args.rows, kThreads, 0, stream, args, release);
    });
    return;
  }
  WEFT_DISPATCH_PRECISION(args.precision, {
    detail::launch(add_norm_kernel<T>, args.rows, kThreads, 0, stream, args, release);
  });
}

}  // namespace weft::cuda
