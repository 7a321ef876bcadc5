#include <cfloat>

#include "kernels/cuda/alibi_attention.hpp"
#include "kernels/cuda/common.cuh"

namespace weft::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxPerLane = 8;  // head_dim <= 256

template <class T>
__global__ void __launch_bounds__(kWarps * 32)
    alibi_attention_kernel(AttentionArgs a, const float* slopes, FlatBatchView b, PagedKvView kv) {
  extern __shared__ float smem[];  // kWarps maxima, kWarps sums, kWarps * head_dim partials
  detail::grid_dependency_wait();
  const int t = blockIdx.x, h = blockIdx.y;
  const int D = kv.head_dim;
  const int kvh = h / (a.num_heads / kv.num_kv_heads);
  const int pos = b.positions[t];
  const std::int32_t* pages = b.page_ids + b.page_table_begin[b.token_seq[t]];
  const int first =
      a.sliding_window > 0 && pos + 1 > a.sliding_window ? pos + 1 - a.sliding_window : 0;
  const float* q = a.q + static_cast<std::size_t>(t) * a.q_stride + static_cast<std::size_t>(h) * D;
  const float slope = slopes[h];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float qv[kMaxPerLane], acc[kMaxPerLane];
#pragma unroll
  for (int k = 0; k < kMaxPerLane; ++k) {
    const int d = lane + 32 * k;
    qv[k] = d < D ? q[d] : 0.0f;
    acc[k] = 0.0f;
  }
  const T* pool = static_cast<const T*>(kv.pool);
  const std::size_t v_offset = static_cast<std::size_t>(kv.num_kv_heads) * kv.page_size * D;
  float m = -FLT_MAX, l = 0.0f;
  for (int j = first + warp; j <= pos; j += kWarps) {
    const std::size_t base = static_cast<std::size_t>(pages[j / kv.page_size]) * kv.page_elems +
                             kv.layer_offset +
                             (static_cast<std::size_t>(kvh) * kv.page_size + j % kv.page_size) * D;
    const T* key = pool + base;
    const T* value = key + v_offset;
    float dot = 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxPerLane; ++k) {
      const int d = lane + 32 * k;
      if (d < D) dot += qv[k] * detail::to_float(key[d]);
    }
    dot = detail::warp_sum(dot);
    const float s = dot * a.scale + slope * static_cast<float>(j - pos);
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new);
    const float p = expf(s - m_new);
    l = l * correction + p;
#pragma unroll
    for (int k = 0; k < kMaxPerLane; ++k) {
      const int d = lane + 32 * k;
      if (d < D) acc[k] = acc[k] * correction + p * detail::to_float(value[d]);
    }
    m = m_new;
  }
  float* maxima = smem;
  float* sums = smem + kWarps;
  float* partial = smem + 2 * kWarps;
  if (lane == 0) {
    maxima[warp] = m;
    sums[warp] = l;
  }
#pragma unroll
  for (int k = 0; k < kMaxPerLane; ++k) {
    const int d = lane + 32 * k;
    if (d < D) partial[warp * D + d] = acc[k];
  }
  __syncthreads();
  float top = -FLT_MAX;
  for (int w = 0; w < kWarps; ++w)
    top = fmaxf(top, maxima[w]);
  float total = 0.0f;
  for (int w = 0; w < kWarps; ++w)
    total += sums[w] * expf(maxima[w] - top);  // a warp without keys has sum 0
  T* out = static_cast<T*>(a.out) + static_cast<std::size_t>(t) * a.num_heads * D +
           static_cast<std::size_t>(h) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w)
      o += partial[w * D + d] * expf(maxima[w] - top);
    out[d] = detail::from_float<T>(o / total);
  }
}

}  // namespace

void alibi_attention(const AttentionArgs& args, const float* slopes, const FlatBatchView& batch,
                     const PagedKvView& kv, cudaStream_t stream) {
  if (batch.num_tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(batch.num_tokens), static_cast<unsigned>(args.num_heads));
  const std::size_t shared = (2 * kWarps + static_cast<std::size_t>(kWarps) * kv.head_dim) * 4;
  WEFT_DISPATCH_PRECISION(kv.precision, {
    detail::launch(alibi_attention_kernel<T>, grid, kWarps * 32, shared, stream, args, slopes,
                   batch, kv);
  });
}

}  // namespace weft::cuda
