// Encoder-decoder attention with T5's relative bias, and the small row kernels around it.
// See seq2seq.hpp.

#include <cfloat>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/seq2seq.hpp"

namespace weft::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kRowThreads = 256;

// Shared memory: the scaled query head [kSeq2SeqMaxHeadDim], 32 floats of reduction scratch,
// then one score (later one probability) per key.
std::size_t attention_shared_bytes(int max_keys) {
  return sizeof(float) *
         (static_cast<std::size_t>(kSeq2SeqMaxHeadDim) + 32 + static_cast<std::size_t>(max_keys));
}

// Where key j of a row lives: j itself, or its slot in the row's pages.
__device__ __forceinline__ std::size_t key_slot(const Seq2SeqAttentionRow& row, int page_size,
                                                int j) {
  if (row.pages == nullptr) return static_cast<std::size_t>(j);
  return static_cast<std::size_t>(row.pages[j / page_size]) * page_size + j % page_size;
}

template <class KV, class Out>
__global__ void __launch_bounds__(kThreads)
    seq2seq_attention_kernel(Seq2SeqAttentionArgs a, const Seq2SeqAttentionRow* rows) {
  extern __shared__ float shared[];
  float* q_s = shared;
  float* scratch = q_s + kSeq2SeqMaxHeadDim;
  float* scores = scratch + 32;
  const Seq2SeqAttentionRow row = rows[blockIdx.x];
  const int head = static_cast<int>(blockIdx.y);
  const int D = a.head_dim;
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  const int n = row.num_keys;

  const float* q =
      a.q + static_cast<std::size_t>(blockIdx.x) * a.q_stride + static_cast<std::size_t>(head) * D;
  for (int d = tid; d < D; d += kThreads)
    q_s[d] = q[d] * a.scale;
  __syncthreads();

  const KV* base = static_cast<const KV*>(row.base);
  const KV* keys = base + a.k_offset + static_cast<std::size_t>(head) * D;
  const float* bias =
      a.position_bias != nullptr
          ? a.position_bias + static_cast<std::size_t>(head) * (2 * a.bias_radius + 1)
          : nullptr;
  // Scores: each warp takes every kWarps-th key, its lanes splitting the head's dimensions.
  for (int j = warp; j < n; j += kWarps) {
    const KV* k = keys + key_slot(row, a.page_size, j) * a.kv_stride;
    float dot = 0.0f;
    for (int d = lane; d < D; d += 32)
      dot += q_s[d] * detail::to_float(k[d]);
    dot = detail::warp_sum(dot);
    if (lane == 0) {
      if (bias != nullptr) {
        const int rel = min(max(j - row.query_position, -a.bias_radius), a.bias_radius);
        dot += bias[rel + a.bias_radius];
      }
      scores[j] = dot;
    }
  }
  __syncthreads();

  float m = -FLT_MAX;
  for (int j = tid; j < n; j += kThreads)
    m = fmaxf(m, scores[j]);
  m = detail::block_max(m, scratch);
  float sum = 0.0f;
  for (int j = tid; j < n; j += kThreads) {
    const float p = expf(scores[j] - m);
    scores[j] = p;
    sum += p;
  }
  // block_sum's barriers also make every probability visible to every thread.
  sum = detail::block_sum(sum, scratch);
  const float inv = 1.0f / sum;

  const KV* values = base + a.v_offset + static_cast<std::size_t>(head) * D;
  Out* out = static_cast<Out*>(a.out) + static_cast<std::size_t>(blockIdx.x) * a.num_heads * D +
             static_cast<std::size_t>(head) * D;
  for (int d = tid; d < D; d += kThreads) {
    float acc = 0.0f;
    for (int j = 0; j < n; ++j)
      acc += scores[j] * detail::to_float(values[key_slot(row, a.page_size, j) * a.kv_stride + d]);
    out[d] = detail::from_float<Out>(acc * inv);
  }
}

template <class KV, class Out>
void launch_attention(const Seq2SeqAttentionArgs& a, const Seq2SeqAttentionRow* rows, int num_rows,
                      cudaStream_t stream) {
  const std::size_t shared = attention_shared_bytes(a.max_keys);
  if (shared > 48 * 1024) {
    cudaFuncSetAttribute(seq2seq_attention_kernel<KV, Out>,
                         cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
  }
  const dim3 grid(static_cast<unsigned>(num_rows), static_cast<unsigned>(a.num_heads));
  seq2seq_attention_kernel<KV, Out><<<grid, kThreads, shared, stream>>>(a, rows);
}

__global__ void add_bias_rows_kernel(float* y, int n, int stride, const float* bias) {
  float* row = y + static_cast<std::size_t>(blockIdx.x) * stride;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += kRowThreads)
    row[i] += bias[i];
}

template <class T>
__global__ void store_rows16_kernel(const float* src, int src_stride, int width, void* const* dst,
                                    std::size_t offset) {
  const float* in = src + static_cast<std::size_t>(blockIdx.x) * src_stride;
  T* out = static_cast<T*>(dst[blockIdx.x]) + offset;
  for (int i = static_cast<int>(threadIdx.x); i < width; i += kRowThreads)
    out[i] = detail::from_float<T>(in[i]);
}

__global__ void scale_add_rows_kernel(float* x, int hidden, float scale, const float* table,
                                      const std::int32_t* table_rows) {
  float* row = x + static_cast<std::size_t>(blockIdx.x) * hidden;
  const float* add = table != nullptr
                         ? table + static_cast<std::size_t>(table_rows[blockIdx.x]) * hidden
                         : nullptr;
  for (int i = static_cast<int>(threadIdx.x); i < hidden; i += kRowThreads) {
    // Rounded before the add, as the CPU model does (a contracted fma would differ by an ulp).
    float v = __fmul_rn(row[i], scale);
    if (add != nullptr) v += add[i];
    row[i] = v;
  }
}

}  // namespace

void seq2seq_attention(const Seq2SeqAttentionArgs& args, const Seq2SeqAttentionRow* rows,
                       int num_rows, cudaStream_t stream) {
  if (num_rows <= 0 || args.num_heads <= 0 || args.head_dim <= 0 ||
      args.head_dim > kSeq2SeqMaxHeadDim || args.max_keys <= 0 || args.max_keys > kSeq2SeqMaxKeys) {
    return;
  }
  WEFT_DISPATCH_PRECISION(args.precision, {
    switch (args.kv) {
      case KvSource::kF32:
        launch_attention<float, T>(args, rows, num_rows, stream);
        break;
      case KvSource::kBF16:
        launch_attention<__nv_bfloat16, T>(args, rows, num_rows, stream);
        break;
      case KvSource::kF16:
        launch_attention<__half, T>(args, rows, num_rows, stream);
        break;
    }
  });
}

void add_bias_rows(float* y, int rows, int n, int stride, const float* bias, cudaStream_t stream) {
  if (rows <= 0 || n <= 0 || bias == nullptr) return;
  add_bias_rows_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(y, n, stride, bias);
}

void store_rows16(const float* src, int src_stride, int width, void* const* dst, std::size_t offset,
                  int rows, Precision precision, cudaStream_t stream) {
  if (rows <= 0 || width <= 0) return;
  WEFT_DISPATCH_PRECISION(precision, {
    store_rows16_kernel<T><<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
        src, src_stride, width, dst, offset);
  });
}

void scale_add_rows(float* x, int tokens, int hidden, float scale, const float* table,
                    const std::int32_t* table_rows, cudaStream_t stream) {
  if (tokens <= 0 || hidden <= 0) return;
  scale_add_rows_kernel<<<static_cast<unsigned>(tokens), kRowThreads, 0, stream>>>(
      x, hidden, scale, table, table_rows);
}

}  // namespace weft::cuda
