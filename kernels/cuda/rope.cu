#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_element.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/rope.hpp"
#include "kernels/cuda/tree_slots.cuh"

namespace weft::cuda {
namespace {

constexpr int kMaxHalf = 128;

// KV: the page element type (T, or int8/fp8: each row quantized by a warp with its scale).
template <class KV>
__global__ void rope_store_kv_kernel(RopeArgs a, FlatBatchView b, PagedKvView kv) {
  const int t = blockIdx.x;
  const int D = kv.head_dim, NH = a.num_heads, NKV = kv.num_kv_heads;
  const int width = (NH + 2 * NKV) * D;
  float* row = a.qkv + static_cast<std::size_t>(t) * width;
  if (a.qkv_bias != nullptr) {
    for (int i = threadIdx.x; i < width; i += blockDim.x)
      row[i] += a.qkv_bias[i];
    __syncthreads();
  }
  const int seq = b.token_seq[t];
  const int slot_pos = b.positions[t];
  const int pos = a.positions != nullptr ? a.positions[t] : slot_pos;
  const int R = a.rotary_dim, half = R / 2;
  if (R > 0) {
    const float* freq = a.inv_freq + static_cast<std::size_t>(seq) * half;
    const float factor = a.attention_factor[seq];
    // The token's cos and sin per pair, once, shared by every head (up to kMaxHalf pairs; the
    // attention kernels take head_dim <= 256; past that, computed per element).
    __shared__ float cos_s[kMaxHalf], sin_s[kMaxHalf];
    const bool cached = half <= kMaxHalf;
    for (int j = threadIdx.x; cached && j < half; j += blockDim.x)
      detail::rope_cos_sin(pos, freq[j], factor, cos_s[j], sin_s[j]);
    __syncthreads();
    // One thread per (head, pair) over the q and k heads; each pair is rotated by one thread.
    for (int i = threadIdx.x; i < (NH + NKV) * half; i += blockDim.x) {
      const int head = i / half, j = i % half;
      const int ia = a.interleaved ? 2 * j : j;
      const int ib = a.interleaved ? 2 * j + 1 : j + half;
      float c, s;
      if (cached) {
        c = cos_s[j];
        s = sin_s[j];
      } else {
        detail::rope_cos_sin(pos, freq[j], factor, c, s);
      }
      float* v = row + head * D;
      detail::rotate_pair(v[ia], v[ib], c, s, v[ia], v[ib]);
    }
    __syncthreads();
  }
  const int kv_slot = slot_table(b, t).slot(slot_pos);  // a tree node's scratch slot
  const int page = b.page_ids[b.page_table_begin[seq] + kv_slot / kv.page_size];
  const int slot = kv_slot % kv.page_size;
  KV* block =
      static_cast<KV*>(kv.pool) + static_cast<std::size_t>(page) * kv.page_elems + kv.layer_offset;
  if constexpr (detail::kv_scaled<KV>) {
    // A warp per row: the k heads' rows, then the v heads' (r = NKV + h), as in the page.
    float* scales =
        reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(block) + kv.scales_offset);
    const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
    for (int r = warp; r < 2 * NKV; r += warps) {
      const int at = r * kv.page_size + slot;
      const float scale = detail::kv_quantize_row_warp<KV>(
          row + (NH + r) * D, D, block + static_cast<std::size_t>(at) * D);
      if ((threadIdx.x & 31) == 0) scales[at] = scale;
    }
  } else {
    const std::size_t v_offset = static_cast<std::size_t>(NKV) * kv.page_size * D;
    for (int i = threadIdx.x; i < NKV * D; i += blockDim.x) {
      const int h = i / D, d = i % D;
      const std::size_t at = (static_cast<std::size_t>(h) * kv.page_size + slot) * D + d;
      block[at] = detail::from_float<KV>(row[(NH + h) * D + d]);
      block[v_offset + at] = detail::from_float<KV>(row[(NH + NKV + h) * D + d]);
    }
  }
}

// The common case (no qkv bias, the whole head rotated) with one thread per work item and no
// barrier: items [0, (NH + NKV) * half) rotate one pair of a q or k head (a k pair is also
// written to the cache), the next NKV * D items copy one value element. The grid's y is the
// token. Each value goes through the same expressions as in rope_store_kv_kernel.
template <class T>
__global__ void rope_store_kv_flat_kernel(RopeArgs a, FlatBatchView b, PagedKvView kv) {
  detail::grid_dependency_wait();
  const int t = blockIdx.y;
  const int D = kv.head_dim, NH = a.num_heads, NKV = kv.num_kv_heads;
  const int half = D / 2;
  const int pairs = (NH + NKV) * half;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= pairs + NKV * D) return;
  float* row = a.qkv + static_cast<std::size_t>(t) * (NH + 2 * NKV) * D;
  const int seq = b.token_seq[t];
  const int slot_pos = b.positions[t];
  const int pos = a.positions != nullptr ? a.positions[t] : slot_pos;
  const int kv_slot = slot_table(b, t).slot(slot_pos);  // a tree node's scratch slot
  const int page = b.page_ids[b.page_table_begin[seq] + kv_slot / kv.page_size];
  const int slot = kv_slot % kv.page_size;
  T* block =
      static_cast<T*>(kv.pool) + static_cast<std::size_t>(page) * kv.page_elems + kv.layer_offset;
  if (i < pairs) {
    const float* freq = a.inv_freq + static_cast<std::size_t>(seq) * half;
    const int head = i / half, j = i % half;
    const int ia = a.interleaved ? 2 * j : j;
    const int ib = a.interleaved ? 2 * j + 1 : j + half;
    float* v = row + head * D;
    const float x0 = v[ia], x1 = v[ib];
    float c, s, y0, y1;
    detail::rope_cos_sin(pos, freq[j], a.attention_factor[seq], c, s);
    detail::rotate_pair(x0, x1, c, s, y0, y1);
    v[ia] = y0;
    v[ib] = y1;
    if (head >= NH) {
      const std::size_t at = (static_cast<std::size_t>(head - NH) * kv.page_size + slot) * D;
      block[at + ia] = detail::from_float<T>(y0);
      block[at + ib] = detail::from_float<T>(y1);
    }
  } else {
    const int e = i - pairs;
    const int h = e / D, d = e % D;
    const std::size_t v_offset = static_cast<std::size_t>(NKV) * kv.page_size * D;
    const std::size_t at = (static_cast<std::size_t>(h) * kv.page_size + slot) * D + d;
    block[v_offset + at] = detail::from_float<T>(row[(NH + NKV + h) * D + d]);
  }
}

}  // namespace

void rope_store_kv(const RopeArgs& args, const FlatBatchView& batch, const PagedKvView& kv,
                   cudaStream_t stream) {
  if (batch.num_tokens == 0) return;
  if (kv_dtype_scaled(kv.dtype)) {  // a row's scale needs the whole row: a warp per row
    WEFT_DISPATCH_KV(
        kv, { rope_store_kv_kernel<KV><<<batch.num_tokens, 256, 0, stream>>>(args, batch, kv); });
    return;
  }
  if (args.qkv_bias == nullptr && args.rotary_dim == kv.head_dim && kv.head_dim % 2 == 0 &&
      batch.num_tokens <= 65535) {
    const int items =
        (args.num_heads + kv.num_kv_heads) * (kv.head_dim / 2) + kv.num_kv_heads * kv.head_dim;
    const dim3 grid((items + 255) / 256, batch.num_tokens);
    WEFT_DISPATCH_PRECISION(kv.precision, {
      detail::launch(rope_store_kv_flat_kernel<T>, grid, 256, 0, stream, args, batch, kv);
    });
    return;
  }
  WEFT_DISPATCH_PRECISION(kv.precision, {
    rope_store_kv_kernel<T><<<batch.num_tokens, 256, 0, stream>>>(args, batch, kv);
  });
}

}  // namespace weft::cuda
