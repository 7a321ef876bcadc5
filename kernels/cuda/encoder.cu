// Encoder attention (both directions, packed sequences) and BERT's post-norm. See encoder.hpp.

#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/encoder.hpp"

namespace weft::cuda {
namespace {

constexpr int kKeys = 32;  // keys per shared-memory chunk: one per lane when scoring
constexpr int kWarps = 4;
constexpr int kQueriesPerWarp = kEncoderTileQueries / kWarps;
constexpr int kDimsPerLane = kEncoderMaxHeadDim / 32;  // a lane owns dims lane, lane + 32, ...
constexpr int kNormThreads = 256;

static_assert(kEncoderTileQueries % kWarps == 0);

// q [tile queries][D] (pre-scaled), K [kKeys][D + 1] (padded: lane j reads row j while
// scoring, and rows D + 1 floats apart fall in different banks), V [kKeys][D] (read along a
// row by the lanes).
std::size_t attention_shared_bytes(int head_dim) {
  const auto D = static_cast<std::size_t>(head_dim);
  return sizeof(float) * (kEncoderTileQueries * D + kKeys * (D + 1) + kKeys * D);
}

template <class T>
__global__ void __launch_bounds__(kWarps * 32)
    encoder_attention_kernel(EncoderAttentionArgs a, const EncoderTile* tiles) {
  extern __shared__ float shared[];
  const EncoderTile tile = tiles[blockIdx.x];
  const int head = static_cast<int>(blockIdx.y);
  const int D = a.head_dim;
  const int width = a.num_heads * D;
  float* q_s = shared;
  float* k_s = q_s + kEncoderTileQueries * D;
  float* v_s = k_s + kKeys * (D + 1);
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const float* bias = a.qkv_bias;

  for (int i = static_cast<int>(threadIdx.x); i < kEncoderTileQueries * D;
       i += static_cast<int>(blockDim.x)) {
    const int r = i / D, d = i - r * D;
    float v = 0.0f;
    if (r < tile.queries) {
      const int col = head * D + d;
      v = a.qkv[static_cast<std::size_t>(tile.first_query + r) * a.qkv_stride + col];
      if (bias != nullptr) v += bias[col];
      v *= a.scale;
    }
    q_s[i] = v;
  }

  // Online softmax per query (FlashAttention's recurrence): running max m, running sum l,
  // and the unnormalized output, rescaled whenever the max grows.
  float m[kQueriesPerWarp], l[kQueriesPerWarp], acc[kQueriesPerWarp][kDimsPerLane];
#pragma unroll
  for (int j = 0; j < kQueriesPerWarp; ++j) {
    m[j] = -INFINITY;
    l[j] = 0.0f;
#pragma unroll
    for (int c = 0; c < kDimsPerLane; ++c)
      acc[j][c] = 0.0f;
  }

  for (int chunk = 0; chunk < tile.sequence_length; chunk += kKeys) {
    const int keys = min(kKeys, tile.sequence_length - chunk);
    __syncthreads();  // the previous chunk is consumed (and q_s written, before the first)
    for (int i = static_cast<int>(threadIdx.x); i < kKeys * D; i += static_cast<int>(blockDim.x)) {
      const int r = i / D, d = i - r * D;
      float k = 0.0f, v = 0.0f;
      if (r < keys) {
        const std::size_t row =
            static_cast<std::size_t>(tile.sequence_begin + chunk + r) * a.qkv_stride;
        const int kc = width + head * D + d, vc = 2 * width + head * D + d;
        k = a.qkv[row + kc];
        v = a.qkv[row + vc];
        if (bias != nullptr) {
          k += bias[kc];
          v += bias[vc];
        }
      }
      k_s[r * (D + 1) + d] = k;
      v_s[r * D + d] = v;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kQueriesPerWarp; ++j) {
      const int qi = warp * kQueriesPerWarp + j;
      if (qi < tile.queries) {  // the same for every lane of the warp
        float s = -INFINITY;
        if (lane < keys) {
          const float* qrow = q_s + qi * D;
          const float* krow = k_s + lane * (D + 1);
          float dot = 0.0f;
          for (int d = 0; d < D; ++d)
            dot += qrow[d] * krow[d];
          s = dot;
        }
        // keys >= 1, so lane 0's score is finite and so is m_new.
        const float m_new = fmaxf(m[j], detail::warp_max(s));
        const float p = lane < keys ? expf(s - m_new) : 0.0f;
        const float correction = expf(m[j] - m_new);  // 0 on the first chunk (m = -inf)
        l[j] = l[j] * correction + detail::warp_sum(p);
#pragma unroll
        for (int c = 0; c < kDimsPerLane; ++c)
          acc[j][c] *= correction;
        for (int key = 0; key < keys; ++key) {
          const float pk = __shfl_sync(0xffffffffu, p, key);
          const float* vrow = v_s + key * D;
#pragma unroll
          for (int c = 0; c < kDimsPerLane; ++c) {
            const int d = lane + 32 * c;
            if (d < D) acc[j][c] += pk * vrow[d];
          }
        }
        m[j] = m_new;
      }
    }
  }

  T* out = static_cast<T*>(a.out);
#pragma unroll
  for (int j = 0; j < kQueriesPerWarp; ++j) {
    const int qi = warp * kQueriesPerWarp + j;
    if (qi < tile.queries) {
      const float inv = 1.0f / l[j];
      T* row = out + static_cast<std::size_t>(tile.first_query + qi) * width + head * D;
#pragma unroll
      for (int c = 0; c < kDimsPerLane; ++c) {
        const int d = lane + 32 * c;
        if (d < D) row[d] = detail::from_float<T>(acc[j][c] * inv);
      }
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kNormThreads)
    encoder_post_norm_kernel(float* residual, const float* delta, const float* delta_bias, int n,
                             const float* weight, const float* bias, float eps, T* out) {
  __shared__ float scratch[32];
  const std::size_t row = blockIdx.x;
  float* x = residual + row * n;
  const float* d = delta != nullptr ? delta + row * n : nullptr;
  // Each thread reads and writes only its own elements, so no barrier is needed between the
  // passes beyond those inside block_sum.
  float sum = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) {
    float v = x[i];
    if (d != nullptr) {
      v += d[i];
      if (delta_bias != nullptr) v += delta_bias[i];
      x[i] = v;
    }
    sum += v;
  }
  const float mean = detail::block_sum(sum, scratch) / static_cast<float>(n);
  float var = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) {
    const float c = x[i] - mean;
    var += c * c;
  }
  const float inv = rsqrtf(detail::block_sum(var, scratch) / static_cast<float>(n) + eps);
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) {
    float y = (x[i] - mean) * inv * weight[i];
    if (bias != nullptr) y += bias[i];
    x[i] = y;
    if (out != nullptr) out[row * n + i] = detail::from_float<T>(y);
  }
}

}  // namespace

void encoder_attention(const EncoderAttentionArgs& args, const EncoderTile* tiles, int num_tiles,
                       cudaStream_t stream) {
  if (num_tiles <= 0 || args.num_heads <= 0 || args.head_dim <= 0 ||
      args.head_dim > kEncoderMaxHeadDim) {
    return;
  }
  const std::size_t shared = attention_shared_bytes(args.head_dim);
  const dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(args.num_heads));
  WEFT_DISPATCH_PRECISION(args.precision, {
    if (shared > 48 * 1024) {
      cudaFuncSetAttribute(encoder_attention_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(shared));
    }
    encoder_attention_kernel<T><<<grid, kWarps * 32, shared, stream>>>(args, tiles);
  });
}

void encoder_post_norm(float* residual, const float* delta, const float* delta_bias, int rows,
                       int n, const float* weight, const float* bias, float eps, void* out,
                       Precision precision, cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return;
  WEFT_DISPATCH_PRECISION(precision, {
    encoder_post_norm_kernel<T><<<static_cast<unsigned>(rows), kNormThreads, 0, stream>>>(
        residual, delta, delta_bias, n, weight, bias, eps, static_cast<T*>(out));
  });
}

}  // namespace weft::cuda
