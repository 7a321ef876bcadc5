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

}  // namespace

void add_norm(const AddNormArgs& args, cudaStream_t stream) {
  if (args.rows == 0) return;
  WEFT_DISPATCH_PRECISION(args.precision,
                          { add_norm_kernel<T><<<args.rows, kThreads, 0, stream>>>(args); });
}

}  // namespace weft::cuda
