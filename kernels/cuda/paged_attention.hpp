#pragma once
// Attention of the step's queries over keys and values in KV pages (vLLM's PagedAttention),
// causal, with an optional sliding window, over a flat variable-length batch. Two kernels:
//
// - decode: one block per (query token, kv head, split) computes every query head of the
//   kv head's group, so each KV page is read once per kv head (GQA/MQA-aware). Contexts over
//   64 positions are cut into up to 32 splits of a multiple of 64 positions, combined by a
//   second kernel (flash-decoding); the cut depends only on the token's own context, so its
//   result does not depend on what runs beside it. For head_dim 64, 128 and 256 and up to 8
//   query heads per kv head (Llama-3-8B: 128 and 4) the block
//     1. computes its tile's 64 row offsets once (page table) and copies the keys and values
//        into shared memory with cp.async, 16 bytes per instruction, so a whole tile is in
//        flight without holding registers (two tiles in turn when a split has more);
//     2. gives each of its 4 warps 16 keys of the tile, with its own online softmax: S = q K^T
//        and O^T += V^T P^T are tensor-core products (mma.sync m16n8k16, 16-bit inputs, fp32
//        accumulators; the group's heads are the 8 columns). q*scale and the softmax weights
//        are split into a 16-bit value and a 16-bit remainder, each multiplied, so results
//        match fp32 arithmetic within accumulation rounding; head_dim slots are permuted
//        alike on both sides of each product so every fragment is one 16-byte load;
//     3. merges the warps in warp order and writes the output or the split's record.
//   Against the previous kernel (a warp per key, then a block staging scores in shared
//   memory) this cuts the per-key instructions and the serial load chains; what still
//   limits it (ncu, Llama-3-8B batch 64) is per-block latency: 64 keys per block, a chain of
//   dependent loads before its copy, 4 blocks per SM (128 registers), DRAM at ~50% of peak.
//   head_dim 32 runs a register kernel (lanes of a key read 16 bytes each, a softmax per
//   warp), other shapes a scalar one.
//   The pipelined kernel (DecodeAttentionKernel::kPipelined, decode_attention.cu) serves the
//   same 16-bit shapes with the same per-tile arithmetic and splits, but one block walks a
//   run of consecutive splits ("part") of its token through a ring of 2-4 shared-memory
//   stages filled by cp.async (the next tiles and their page-table lookups in flight while it
//   computes one), so its setup is paid once per part and its loads overlap its compute. The
//   launch cuts contexts into as few parts as fill the GPU (one part at large batches: the
//   block folds its splits itself and writes the output, no workspace and no combine
//   launch); a token's splits are folded in split order in either case, bitwise alike, so
//   results do not depend on the batch.
// - prefill: one block per (tile of up to 32 consecutive query tokens of one sequence, query
//   head) walks the keys in tiles of 32 with an online softmax (FlashAttention's recurrence),
//   staging K and V tiles in shared memory. Straightforward CUDA-core code, no tensor cores.
//
// Softmax and accumulation are fp32; q comes fp32 from the rope kernel, K/V are 16-bit, or
// int8/fp8 (e4m3) with a scale per (token, kv head) row (kernels/kv_dtype.hpp). Quantized
// pages take the streaming tensor-core decode kernel where it serves the shape (kStream
// below; one-byte tiles converted exactly to 16-bit in the tile step, a key's scale
// multiplying its score, a value's its softmax weight), else the CUDA-core kernels: decode
// the warp kernel for head_dim 32, 64, 128 and 256 with 8-byte loads, the scalar one
// otherwise. Prefill: the mma.sync kernel for head_dim 64 and 128 (one-byte stages converted
// exactly into 16-bit tiles, the scales on S's columns and P's), else the CUDA-core kernel,
// which widens each K/V tile times its rows' scales into 16-bit shared memory. The other
// tensor-core kernels read 16-bit pages only.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/paged_kv.hpp"

namespace weft::cuda {

struct AttentionArgs {
  const float* q = nullptr;  // token t's head h at q + t * q_stride + h * head_dim
  std::size_t q_stride = 0;
  int num_heads = 0;
  float scale = 1.0f;
  int sliding_window = 0;  // 0: attend to every earlier position
  void* out = nullptr;     // [tokens, num_heads * head_dim] in kv.precision
  // decode_attention only, where decode_attention_applies_rope says it can: q points at the
  // qkv product's rows as they come out of it (q heads, then k, then v heads; no bias), and
  // the kernel does rope_store_kv's work for its tokens itself: it rotates q (every pair
  // (i, i + head_dim / 2)) and the token's key by these frequencies, and stores the key and
  // value into the token's page slot. Bitwise what rope_store_kv followed by decode_attention
  // gives (the rotation's arithmetic is shared: rope.cuh); one launch less per layer.
  const float* rope_inv_freq = nullptr;  // [sequences][head_dim / 2]
  const float* rope_factor = nullptr;    // [sequences]
  // The streaming decode kernel's segment (kStream): positions per segment at least this
  // many (a multiple of 64 from 64 to 4096); 0: the process's (WEFT_DECODE_STREAM_SEGMENT_KEYS,
  // 256 unset). It sets the kernel's rounding, so a caller keeps one value for every batch
  // (a model: CudaModelOptions::decode_segment_keys); smaller segments spread a few tokens'
  // keys over more blocks.
  int segment_keys = 0;
};

// Whether `keys` is a segment the streaming kernel takes (AttentionArgs::segment_keys,
// WEFT_DECODE_STREAM_SEGMENT_KEYS): a multiple of 64 from 64 to 4096.
constexpr bool decode_segment_keys_valid(int keys) {
  return keys >= 64 && keys <= 4096 && keys % 64 == 0;
}

// The decode kernel cuts a context of `span` positions into at most kMaxDecodeSplits splits
// of a multiple of kDecodeSplitQuantum positions each. The cut depends only on the span, so a
// token's result does not depend on the batch it runs in.
inline constexpr int kDecodeSplitQuantum = 64;
inline constexpr int kMaxDecodeSplits = 32;

// The decode kernel for head_dim 64, 128 or 256 and up to 8 query heads per kv head (other
// shapes keep their kernels; int8/fp8 pages too, except under kStream, which reads them):
// - kSplit: a block per (token, kv head, split), records combined by a second kernel;
// - kPipelined: a block per (token, kv head, part of consecutive splits), tiles pipelined.
// - kStream: a block per (token, kv head, part of consecutive segments of at least 256
//   positions), each warp streaming its own tiles through a cp.async ring
//   (decode_attention_stream.cu), sized to keep the memory pipe full at large batches.
// Their outputs differ by rounding only (the pipelined and streaming kernels fold their
// pieces in order; each is batch invariant). The environment variable
// WEFT_DECODE_ATTN=stream|old|new (or split|pipelined) sets the initial choice, kStream when
// unset (measured on the H100 on 2026-11-26: 19-24 % faster 8B decode steps at batches 256-512,
// within 1 % at batches 1-2; docs/PERFORMANCE.md). One kernel for every batch size keeps a
// token's result independent of its batch; set_decode_attention_kernel changes it for later
// launches (benchmarks, tests). CUDA graphs captured before keep the kernel they captured; the
// model's graphs are keyed by decode_split_count, which includes the choice.
enum class DecodeAttentionKernel { kSplit, kPipelined, kStream };
DecodeAttentionKernel decode_attention_kernel();
void set_decode_attention_kernel(DecodeAttentionKernel kernel);
const char* decode_attention_kernel_name(DecodeAttentionKernel kernel);  // "old", "new", "stream"

// Parts per token of the pipelined and streaming kernels: 0 (default) lets the launch choose
// from the batch and the device; n > 0 forces min(n, splits) (WEFT_DECODE_PARTS sets the
// initial value; for tests and tuning). Results are bitwise the same for every value.
int decode_attention_parts();
void set_decode_attention_parts(int parts);

// Lets every attention kernel use all the shared memory a block can opt into. Runs once per
// process (later calls return at once); the launchers call it, and a caller that captures
// launches into a CUDA graph calls it before capturing (it is not a stream operation).
void prepare_attention_kernels();

// Whether decode_attention applies the rotary embedding and stores keys and values itself
// (AttentionArgs::rope_inv_freq) for this shape: head_dim 64, 128 or 256, at most 8 query
// heads per kv head and 16-bit pages (the tensor-core kernel).
bool decode_attention_applies_rope(int num_heads, int num_kv_heads, int head_dim,
                                   KvDtype dtype = KvDtype::kBF16);

// A key of the decode launch for tokens whose longest context is max_context (the grid's
// splits, and which decode kernel is selected): a CUDA graph of a decode step stays valid
// while this and the batch shape do not change.
int decode_split_count(int max_context);

// Floats of workspace decode_attention needs for `queries` tokens whose longest context is
// `max_context` positions (0 when no split is needed).
std::size_t decode_workspace_floats(int queries, int num_heads, int head_dim, int max_context);

// Attention for the tokens listed in query_tokens ([num_queries] device indices into the
// batch), each over positions [max(0, pos + 1 - window), pos] of its sequence.
// max_context bounds pos + 1 over those tokens (it sizes the grid); workspace holds
// decode_workspace_floats(...) floats.
void decode_attention(const AttentionArgs& args, const FlatBatchView& batch, const PagedKvView& kv,
                      const std::int32_t* query_tokens, int num_queries, int max_context,
                      float* workspace, cudaStream_t stream);

// A run of up to prefill_tile_queries(head_dim) consecutive tokens of the flat batch that
// belong to one sequence.
struct PrefillTile {
  std::int32_t first_token = 0;
  std::int32_t count = 0;
};
inline constexpr int kPrefillTileQueries = 32;

// Query tokens per prefill tile: 64 where a tensor-core kernel runs (head_dim 64 or 128: a
// FlashAttention-2-style mma.sync kernel with Q, S, P and O in registers; other multiples of
// 16 up to 256: 16x16x16 WMMA products through shared memory; both bf16/fp16 inputs, fp32
// accumulators, q*scale and P rounded to 16 bits as FlashAttention does; int8/fp8 pages: the
// mma.sync kernel only), else kPrefillTileQueries for the CUDA-core kernel.
int prefill_tile_queries(int head_dim, KvDtype dtype = KvDtype::kBF16);

// Attention for the tokens of `tiles` ([num_tiles] on the device).
void prefill_attention(const AttentionArgs& args, const FlatBatchView& batch, const PagedKvView& kv,
                       const PrefillTile* tiles, int num_tiles, cudaStream_t stream);

}  // namespace weft::cuda
