// The entry points of paged_attention.hpp on the decode side, and what every attention kernel
// shares: the shared-memory opt-in once per process, the decode kernel in use
// (WEFT_DECODE_ATTN), the split count and workspace of a decode launch, and decode_attention's
// dispatch to the pipelined (decode_attention.cu), streaming (decode_attention_stream.cu) or
// per-split (decode_attention_split.cu) kernels. The prefill kernels and prefill_attention are
// in prefill_attention.cu and prefill_attention_mma.cu.

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/decode_attention_pipelined.hpp"
#include "kernels/cuda/decode_attention_split.hpp"
#include "kernels/cuda/decode_attention_stream.hpp"
#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/prefill_attention.hpp"

namespace weft::cuda {

void prepare_attention_kernels() {
  // Once per process, outside any stream capture (the setting is not a stream operation):
  // every attention kernel may use all the shared memory a block can opt into.
  static const bool prepared = [] {
    int device = 0, bytes = 0;
    cudaGetDevice(&device);
    if (cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
            cudaSuccess ||
        bytes <= 0) {
      cudaGetLastError();
      return false;
    }
    detail::prepare_decode_split(bytes);
    detail::prepare_decode_split_cuda_core(bytes);
    detail::prepare_prefill_attention(bytes);
    detail::prepare_prefill_attention_mma(bytes);
    detail::prepare_decode_pipelined(bytes);
    detail::prepare_decode_stream(bytes);
    return true;
  }();
  (void)prepared;
}

bool decode_attention_applies_rope(int num_heads, int num_kv_heads, int head_dim, KvDtype dtype) {
  if (kv_dtype_scaled(dtype)) return false;  // the tensor-core kernel reads 16-bit pages
  if (num_kv_heads <= 0 || num_heads % num_kv_heads != 0) return false;
  return detail::decode_split_tc_supports(head_dim, num_heads / num_kv_heads);
}

namespace {

// decode_attention_kernel(): -1 until read from WEFT_DECODE_ATTN.
std::atomic<int> g_decode_kernel{-1};

DecodeAttentionKernel decode_kernel_from_env() {
  const char* v = std::getenv("WEFT_DECODE_ATTN");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "stream") == 0)
    return DecodeAttentionKernel::kStream;
  if (std::strcmp(v, "old") == 0 || std::strcmp(v, "split") == 0)
    return DecodeAttentionKernel::kSplit;
  if (std::strcmp(v, "new") == 0 || std::strcmp(v, "pipelined") == 0)
    return DecodeAttentionKernel::kPipelined;
  std::fprintf(stderr, "weft: ignoring WEFT_DECODE_ATTN=%s (expected stream, old or new)\n", v);
  return DecodeAttentionKernel::kStream;
}

}  // namespace

DecodeAttentionKernel decode_attention_kernel() {
  int k = g_decode_kernel.load(std::memory_order_relaxed);
  if (k < 0) {
    int expected = -1;
    g_decode_kernel.compare_exchange_strong(expected, static_cast<int>(decode_kernel_from_env()));
    k = g_decode_kernel.load(std::memory_order_relaxed);
  }
  return static_cast<DecodeAttentionKernel>(k);
}

void set_decode_attention_kernel(DecodeAttentionKernel kernel) {
  g_decode_kernel.store(static_cast<int>(kernel), std::memory_order_relaxed);
}

const char* decode_attention_kernel_name(DecodeAttentionKernel kernel) {
  switch (kernel) {
    case DecodeAttentionKernel::kPipelined:
      return "new";
    case DecodeAttentionKernel::kStream:
      return "stream";
    default:
      return "old";
  }
}

int decode_split_count(int max_context) {
  // Each kernel's grid differs: a graph captured with one kernel is not another's.
  const int kernel = static_cast<int>(decode_attention_kernel());
  return detail::decode_splits(max_context) + kernel * (kMaxDecodeSplits + 1);
}

std::size_t decode_workspace_floats(int queries, int num_heads, int head_dim, int max_context) {
  const int splits = detail::decode_splits(max_context);
  if (splits == 1) return 0;
  return static_cast<std::size_t>(queries) * num_heads * splits * (head_dim + 2);
}

void decode_attention(const AttentionArgs& args, const FlatBatchView& batch, const PagedKvView& kv,
                      const std::int32_t* query_tokens, int num_queries, int max_context,
                      float* workspace, cudaStream_t stream) {
  if (num_queries == 0) return;
  prepare_attention_kernels();
  const int D = kv.head_dim;
  if (decode_attention_kernel() == DecodeAttentionKernel::kPipelined &&
      detail::decode_pipelined_supports(args.num_heads, kv.num_kv_heads, D, kv.dtype)) {
    detail::decode_attention_pipelined(args, batch, kv, query_tokens, num_queries, max_context,
                                       workspace, stream);
    return;
  }
  // One-byte pages take no fused rotary embedding (decode_attention_applies_rope).
  const bool rope_on_quantized = kv_dtype_scaled(kv.dtype) && args.rope_inv_freq != nullptr;
  if (decode_attention_kernel() == DecodeAttentionKernel::kStream && !rope_on_quantized &&
      detail::decode_stream_supports(args.num_heads, kv.num_kv_heads, D, kv.dtype)) {
    detail::decode_attention_stream(args, batch, kv, query_tokens, num_queries, max_context,
                                    workspace, stream);
    return;
  }
  detail::decode_attention_split(args, batch, kv, query_tokens, num_queries, max_context, workspace,
                                 stream);
}

}  // namespace weft::cuda
