#include "kernels/cuda/common.cuh"
#include "kernels/cuda/residual_norm.hpp"

namespace weft::cuda {
namespace {

constexpr int kThreads = 256;

// One block per row; the same fp32 arithmetic as add_norm_kernel (norm.cu).
template <class T>
__global__ void residual_norm_kernel(ResidualNormArgs a) {
  __shared__ float scratch[32];
  detail::grid_dependency_wait();
  float* x = a.residual + static_cast<std::size_t>(blockIdx.x) * a.n;
  const float* d =
      a.delta != nullptr ? a.delta + static_cast<std::size_t>(blockIdx.x) * a.n : nullptr;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < a.n; i += blockDim.x) {
    float v = x[i];
    if (d != nullptr) {
      v += d[i] + (a.delta_bias != nullptr ? a.delta_bias[i] : 0.0f);
      x[i] = v;  // each thread rereads only its own elements below
    }
    sum += a.kind == NormKind::kRms ? v * v : v;
  }
  sum = detail::block_sum(sum, scratch);
  float mean = 0.0f, inv = 0.0f;
  if (a.kind == NormKind::kRms) {
    inv = rsqrtf(sum / a.n + a.eps);
  } else {
    mean = sum / a.n;
    float var = 0.0f;
    for (int i = threadIdx.x; i < a.n; i += blockDim.x) {
      const float c = x[i] - mean;
      var += c * c;
    }
    var = detail::block_sum(var, scratch);
    inv = rsqrtf(var / a.n + a.eps);
  }
  T* out = a.out != nullptr ? static_cast<T*>(a.out) + static_cast<std::size_t>(blockIdx.x) * a.n
                            : nullptr;
  for (int i = threadIdx.x; i < a.n; i += blockDim.x) {
    float y = (x[i] - mean) * inv * a.weight[i];
    if (a.bias != nullptr) y += a.bias[i];
    x[i] = y;
    if (out != nullptr) out[i] = detail::from_float<T>(y);
  }
}

__global__ void add_residual_kernel(float* residual, const float* delta, const float* bias, int n) {
  detail::grid_dependency_wait();
  const std::size_t row = blockIdx.x;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    residual[row * n + i] += delta[row * n + i] + (bias != nullptr ? bias[i] : 0.0f);
  }
}

template <class T>
__global__ void rows_to_precision_kernel(const float* x, const std::int32_t* row_index, int n,
                                         T* out) {
  detail::grid_dependency_wait();
  const std::size_t in_row =
      row_index != nullptr ? static_cast<std::size_t>(row_index[blockIdx.x]) : blockIdx.x;
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    out[static_cast<std::size_t>(blockIdx.x) * n + i] = detail::from_float<T>(x[in_row * n + i]);
}

}  // namespace

void residual_norm(const ResidualNormArgs& args, cudaStream_t stream) {
  if (args.rows == 0) return;
  WEFT_DISPATCH_PRECISION(args.precision, {
    detail::launch(residual_norm_kernel<T>, args.rows, kThreads, 0, stream, args);
  });
}

void add_residual(float* residual, const float* delta, const float* bias, int rows, int n,
                  cudaStream_t stream) {
  if (rows == 0) return;
  detail::launch(add_residual_kernel, rows, kThreads, 0, stream, residual, delta, bias, n);
}

void rows_to_precision(const float* x, const std::int32_t* row_index, int rows, int n, void* out,
                       Precision precision, cudaStream_t stream) {
  if (rows == 0) return;
  WEFT_DISPATCH_PRECISION(precision, {
    detail::launch(rows_to_precision_kernel<T>, rows, kThreads, 0, stream, x, row_index, n,
                   static_cast<T*>(out));
  });
}

}  // namespace weft::cuda
