// The per-split decode attention (DecodeAttentionKernel::kSplit; the top of
// paged_attention.hpp describes it): one block per (query token, kv head, split). This file
// holds the tensor-core kernel (16-bit pages, head_dim 64, 128 and 256, up to 8 query heads per
// kv head), the kernel that combines a token's splits, and the launch: the CUDA-core kernels of
// decode_attention_split_cuda_core.cu take the other shapes.

#include <algorithm>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_attention_split.hpp"
#include "kernels/cuda/decode_prologue.cuh"
#include "kernels/cuda/decode_tile.cuh"
#include "kernels/cuda/kv_element.cuh"
#include "kernels/cuda/paged_attention.cuh"
#include "kernels/cuda/tree_slots.cuh"

namespace weft::cuda {
namespace {

using detail::clear_split;
using detail::cp_async16;
using detail::cp_async_commit;
using detail::cp_async_wait;
using detail::decode_span;
using detail::DecodeSpan;
using detail::first_position;
using detail::kDecodeThreads;
using detail::key_offset;
using detail::kMaxGroupInRegisters;
using detail::load_query;
using detail::patch_own_row;
using detail::query_fragments;
using detail::rope_own_kv;
using detail::split_positions;
using detail::tile_attend16;

// Keys per shared-memory tile of the tensor-core decode kernel (16 per warp).
constexpr int kStageKeys = 64;

// Tensor-core decode, one block per (query token, kv head, split) as the other decode
// kernels. The block copies tiles of kStageKeys keys and values into shared memory with
// cp.async (16 bytes per instruction, nothing held in registers while in flight; two tiles
// in turn when a split has more than one), each warp takes 16 keys of the tile with its own
// online softmax, and the four warps are merged in warp order at the end. The products run
// on mma.sync m16n8k16 (16-bit inputs, fp32 accumulators). Per warp and 16 keys:
// - S = Q K^T for the group's heads (rows; up to 8 of the 16 used) and 8 keys at a time:
//   lane (g = lane/4, t = lane%4) takes key g's 16 bytes at elements 32c + 8t of chunk c as
//   its B fragments, and head g's q at the same elements as its A fragments (head_dim
//   slots are permuted the same way on both sides, so the dot products are unchanged);
// - q*scale and the softmax weights p are split into a 16-bit high part and a 16-bit
//   remainder, each multiplied in turn, so the products carry ~16 bits more than one
//   rounding: the result matches fp32 arithmetic within the fp32 accumulators' rounding;
// - O^T += V^T P^T (rows: head_dim, columns: heads): the S fragment a lane holds (head g,
//   keys 2t, 2t+1) is already its B fragment; lane g reads head_dim elements
//   [g*D/8, (g+1)*D/8) of its four keys and packs pairs of keys with byte permutes.
// Every sum runs in an order fixed by the token's context alone.
template <class T, int D>
__global__ void __launch_bounds__(kDecodeThreads, D >= 256   ? 1
                                                  : D >= 128 ? 4
                                                             : 6)
    decode_kernel_tc(AttentionArgs a, FlatBatchView b, PagedKvView kv,
                     const std::int32_t* query_tokens, float* workspace, int stages) {
  detail::grid_dependency_wait();
  constexpr int kVec = 8, L = D / kVec;  // 16-byte chunks per row
  constexpr int kWarps = kDecodeThreads / 32, TP = kStageKeys, kWarpKeys = TP / kWarps;
  constexpr int KC = D / 32;  // k chunks of 32 elements (two m16n8k16 steps each)
  constexpr int VW = D / 16;  // 32-bit words of V per lane and key (= O^T row tiles)
  static_assert(kWarpKeys == 16, "one 16-key PV product per warp and tile");
  constexpr int GM = 8;
  extern __shared__ __align__(16) unsigned char staged_smem[];
  uint4* kv_s = reinterpret_cast<uint4*>(staged_smem);  // [stage][K|V][TP][L]

  const DecodeSpan span = decode_span(a, b, query_tokens);
  const int t = span.t, pos = span.pos, begin = span.begin, end = span.end;
  if (begin > pos) return;  // this token's context has fewer splits than the grid
  const int kvh = blockIdx.x, split = blockIdx.z, splits = gridDim.z;
  const SlotTable table = slot_table(b, t);  // tree nodes: their path's slots
  const int G = a.num_heads / kv.num_kv_heads;
  const T* pool = static_cast<const T*>(kv.pool);
  const std::size_t v_shift = static_cast<std::size_t>(kv.num_kv_heads) * kv.page_size * D;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, tq = lane & 3;

  // Row offsets of the tile being copied, computed once per row (page table, division).
  __shared__ std::size_t row_off[TP];
  auto issue = [&](int tb, int stage) {
    __syncthreads();  // row_off may still be read by the previous copy
    if (threadIdx.x < TP) {
      const int p = tb + threadIdx.x;
      row_off[threadIdx.x] = p < end ? key_offset(kv, table, p, kvh) : 0;
    }
    __syncthreads();
    uint4* ks = kv_s + static_cast<std::size_t>(stage) * 2 * TP * L;
    uint4* vs = ks + TP * L;
#pragma unroll
    for (int c = threadIdx.x; c < TP * L; c += kDecodeThreads) {
      const int i = c / L, part = c % L;
      const bool live = tb + i < end;
      const T* row = pool + row_off[i] + part * kVec;
      cp_async16(ks + c, row, live);
      cp_async16(vs + c, row + v_shift, live);
    }
    cp_async_commit();
  };
  issue(begin, 0);

  // Head g's q (loads in flight before the rotary embedding's barrier).
  float x[KC][8];
  load_query<D>(x, a, t, kvh, G, g, tq);

  // With a.rope_inv_freq, rope_store_kv's work for this token: q is rotated below, and the
  // block whose split ends at the token's own position rotates its key, rounds key and value
  // to T and stores them into the page slot now; they replace that row of the staged tile
  // once the tile has landed (the copy may have read the slot before the store). The rotary
  // table is made while the tile is in flight.
  const bool rope = a.rope_inv_freq != nullptr;
  const bool own_kv = rope && end == pos + 1;
  __shared__ float rope_c[D / 2], rope_s[D / 2];
  uint4 own[2] = {};
  rope_own_kv<T, D, kDecodeThreads>(a, b, kv, table, t, pos, kvh, rope, own_kv, rope_c, rope_s,
                                    own);

  // A fragments of q * scale (head g; rows 8-15 are zero), high parts and remainders.
  unsigned qh[KC][4], ql[KC][4];
  query_fragments<T>(x, rope && g < G, tq, rope_c, rope_s, a.scale, qh, ql);

  float acc[VW][4], m, l;  // head g's running max and this lane's part of its sum
  clear_split(acc, m, l);

  const int tiles = (end - begin + TP - 1) / TP;
  for (int j = 0; j < tiles; ++j) {
    const int stage = stages > 1 ? j & 1 : 0;
    if (stages > 1 && j + 1 < tiles) {
      issue(begin + (j + 1) * TP, (j + 1) & 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const uint4* ks = kv_s + static_cast<std::size_t>(stage) * 2 * TP * L;
    const uint4* vs = ks + TP * L;
    if (own_kv && pos - begin - j * TP < TP) {  // the tile holding the token's own key
      patch_own_row<L, TP>(kv_s + static_cast<std::size_t>(stage) * 2 * TP * L +
                               static_cast<std::size_t>(pos - begin - j * TP) * L,
                           0, own);
      __syncthreads();
    }
    const int i0 = warp * kWarpKeys, k0 = begin + j * TP + i0;
    if (k0 < end) {
      tile_attend16<T, L, false>(ks, vs, i0, k0, end, g, tq, qh, ql, m, l, acc);
    }
    __syncthreads();  // the stage is refilled next
    if (stages == 1 && j + 1 < tiles) issue(begin + (j + 1) * TP, 0);
  }

  // The warp's sums per head: l over the lanes of head g; then merge the warps in order.
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  float* red_acc = reinterpret_cast<float*>(staged_smem);  // [kWarps][GM][D]
  float* red_m = red_acc + kWarps * GM * D;                // [kWarps][GM]
  float* red_l = red_m + kWarps * GM;
  const int ha = 2 * tq, hb = 2 * tq + 1;
#pragma unroll
  for (int i = 0; i < VW; ++i) {
    const int d0 = g * (D / 8) + 2 * i;  // rows g and g + 8 of tile i
    if (ha < G) {
      red_acc[(warp * GM + ha) * D + d0] = acc[i][0];
      red_acc[(warp * GM + ha) * D + d0 + 1] = acc[i][2];
    }
    if (hb < G) {
      red_acc[(warp * GM + hb) * D + d0] = acc[i][1];
      red_acc[(warp * GM + hb) * D + d0 + 1] = acc[i][3];
    }
  }
  if (tq == 0 && g < G) {
    red_m[warp * GM + g] = m;
    red_l[warp * GM + g] = l;
  }
  __syncthreads();
  // Per head: the block's max, each warp's factor e^(m_w - M) and the block's sum.
  __shared__ float fac[kWarps][GM], blk_m[GM], blk_l[GM];
  if (threadIdx.x < G) {
    const int h = threadIdx.x;
    float mm = red_m[h];
    for (int w = 1; w < kWarps; ++w)
      mm = fmaxf(mm, red_m[w * GM + h]);
    float ll = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const float f = expf(red_m[w * GM + h] - mm);
      fac[w][h] = f;
      ll += red_l[w * GM + h] * f;
    }
    blk_m[h] = mm;
    blk_l[h] = ll;
  }
  __syncthreads();
  const int NH = a.num_heads;
  T* out = static_cast<T*>(a.out) + static_cast<std::size_t>(t) * NH * D +
           static_cast<std::size_t>(kvh) * G * D;
  // Split records: [query][head][split] of D accumulators, then m and l.
  float* recs =
      workspace + (static_cast<std::size_t>(blockIdx.y) * NH + kvh * G) * splits * (D + 2);
  for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
    const int h = i / D, d = i % D;
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w)
      o += red_acc[(w * GM + h) * D + d] * fac[w][h];
    if (splits == 1) {
      out[i] = detail::from_float<T>(o / blk_l[h]);
    } else {
      float* rec = recs + (static_cast<std::size_t>(h) * splits + split) * (D + 2);
      rec[d] = o;
      if (d == 0) {
        rec[D] = blk_m[h];
        rec[D + 1] = blk_l[h];
      }
    }
  }
}

using TcKernel = void (*)(AttentionArgs, FlatBatchView, PagedKvView, const std::int32_t*, float*,
                          int);

// The tensor-core kernel for (D, G), or nullptr.
template <class T>
TcKernel decode_tc_kernel(int D, int G) {
  if (G > kMaxGroupInRegisters) return nullptr;
  switch (D) {
    case 64:
      return decode_kernel_tc<T, 64>;
    case 128:
      return decode_kernel_tc<T, 128>;
    case 256:
      return decode_kernel_tc<T, 256>;
    default:
      return nullptr;
  }
}

// Shared memory of the tensor-core kernel: the tiles, or the merge records if larger.
std::size_t tc_shared_bytes(int D, int stages) {
  constexpr int GM = kMaxGroupInRegisters;
  const std::size_t tiles = static_cast<std::size_t>(stages) * 2 * kStageKeys * D * kHalfBytes;
  const std::size_t merge = sizeof(float) * (kDecodeThreads / 32) * GM * (D + 2);
  return std::max(tiles, merge);
}

// Combines a token's splits: out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M), the
// factors e^(m_s - M) computed once per split.
template <class T>
__global__ void combine_kernel(AttentionArgs a, FlatBatchView b, int head_dim,
                               const std::int32_t* query_tokens, const float* workspace,
                               int splits) {
  __shared__ float f[kMaxDecodeSplits];
  detail::grid_dependency_wait();
  __shared__ float total;
  const int h = blockIdx.x, qi = blockIdx.y, D = head_dim;
  const int t = query_tokens[qi];
  const int pos = b.positions[t];
  const int span = pos + 1 - first_position(pos, a.sliding_window);
  const int chunk = split_positions(span);
  const int used = (span + chunk - 1) / chunk;
  const float* recs =
      workspace + (static_cast<std::size_t>(qi) * a.num_heads + h) * splits * (D + 2);
  if (threadIdx.x < 32) {
    const int s = threadIdx.x;
    const float ms = s < used ? recs[s * (D + 2) + D] : -FLT_MAX;
    const float m = detail::warp_max(ms);
    const float fs = s < used ? expf(ms - m) : 0.0f;
    if (s < used) f[s] = fs;
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // the sum in split order
    float l = 0.0f;
    for (int k = 0; k < used; ++k)
      l += recs[k * (D + 2) + D + 1] * f[k];
    total = l;
  }
  __syncthreads();
  T* out = static_cast<T*>(a.out) + static_cast<std::size_t>(t) * a.num_heads * D +
           static_cast<std::size_t>(h) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < used; ++s)
      o += recs[s * (D + 2) + d] * f[s];
    out[d] = detail::from_float<T>(o / total);
  }
}

// Lets `kernel` use all the dynamic shared memory a block can opt into beside its static
// shared memory.
template <class K>
void allow_dynamic_shared_memory(K* kernel, int bytes) {
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       bytes - static_cast<int>(attr.sharedSizeBytes));
}

template <class T>
void allow_all_shared_memory(int bytes) {
  for (int D : {64, 128, 256})
    allow_dynamic_shared_memory(decode_tc_kernel<T>(D, 8), bytes);
}

}  // namespace

namespace detail {

bool decode_split_tc_supports(int head_dim, int group) {
  return decode_tc_kernel<__nv_bfloat16>(head_dim, group) != nullptr;
}

void prepare_decode_split(int bytes) {
  allow_all_shared_memory<__nv_bfloat16>(bytes);
  allow_all_shared_memory<__half>(bytes);
}

void decode_attention_split(const AttentionArgs& args, const FlatBatchView& batch,
                            const PagedKvView& kv, const std::int32_t* query_tokens,
                            int num_queries, int max_context, float* workspace,
                            cudaStream_t stream) {
  const int G = args.num_heads / kv.num_kv_heads, D = kv.head_dim;
  const int splits = decode_splits(max_context);
  const dim3 grid(kv.num_kv_heads, num_queries, splits);
  WEFT_DISPATCH_KV(kv, {
    TcKernel tc = detail::kv_scaled<KV> ? nullptr : decode_tc_kernel<T>(D, G);
    if (tc != nullptr) {
      // Two stages when some token's split spans more than one tile.
      const int chunk = splits > 1 ? split_positions(max_context) : max_context;
      const int stages = chunk > kStageKeys ? 2 : 1;
      detail::launch(tc, grid, kDecodeThreads, tc_shared_bytes(D, stages), stream, args, batch, kv,
                     query_tokens, workspace, stages);
    } else {
      decode_attention_split_cuda_core(args, batch, kv, query_tokens, grid, workspace, stream);
    }
    if (splits > 1) {
      detail::launch(combine_kernel<T>, dim3(args.num_heads, num_queries), 128, 0, stream, args,
                     batch, D, query_tokens, workspace, splits);
    }
  });
}

}  // namespace detail
}  // namespace weft::cuda
