#pragma once
// The blocks of an encoder-decoder forward pass (T5, M2M100) that the decoder-only and
// encoder-only kernels do not cover:
//
//  - attention of one query row over a run of key/value rows anywhere in device memory (the
//    encoder's own fp32 qkv product, a request's self-attention cache, its cross-attention
//    cache), with T5's relative position bias read from a table per head by the distance
//    between key and query (the table is filled on the host from the bucket function, so the
//    buckets are the CPU's bit for bit);
//  - a bias added to the rows of a product, 16-bit copies of product rows into cache rows,
//    and the embedding's scale plus fp32 position rows (M2M100's sinusoidal table).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/precision.hpp"

namespace weft::cuda {

// Keys one attention row may have: its scores live in shared memory (4 bytes each).
inline constexpr int kSeq2SeqMaxKeys = 32768;
inline constexpr int kSeq2SeqMaxHeadDim = 256;

// Element type of the keys and values an attention reads.
enum class KvSource { kF32, kBF16, kF16 };

// One query row: key j of it is at base + k_offset + slot(j) * kv_stride (elements), its value
// at base + v_offset + slot(j) * kv_stride; head h takes elements [h * head_dim, (h + 1) *
// head_dim). slot(j) is j, or with a page table (the engine's pool of pages, whose page p
// holds slots [p * page_size, (p + 1) * page_size)) pages[j / page_size] * page_size +
// j % page_size.
struct Seq2SeqAttentionRow {
  const void* base = nullptr;
  std::int32_t num_keys = 0;            // 1..kSeq2SeqMaxKeys
  std::int32_t query_position = 0;      // for the relative bias: distance = j - query_position
  const std::int32_t* pages = nullptr;  // on the device; null: keys are contiguous
};

struct Seq2SeqAttentionArgs {
  const float* q = nullptr;  // [rows, num_heads * head_dim] fp32, row stride q_stride
  int q_stride = 0;
  KvSource kv = KvSource::kBF16;
  std::size_t k_offset = 0, v_offset = 0, kv_stride = 0;
  int num_heads = 0;
  int head_dim = 0;  // 1..kSeq2SeqMaxHeadDim
  float scale = 1.0f;
  // [num_heads][2 * bias_radius + 1] fp32: score += bias[h][clamp(j - query, -r, r) + r].
  // Null: no position bias.
  const float* position_bias = nullptr;
  int bias_radius = 0;
  int max_keys = 0;     // the largest num_keys of the rows (sizes shared memory)
  int page_size = 0;    // positions a page holds, for rows with a page table
  void* out = nullptr;  // [rows, num_heads * head_dim] in `precision`
  Precision precision = Precision::kBF16;
};

// out[r, h] = softmax_j(q_r,h . k_j,h * scale + bias) . v_j,h for every row of `rows`
// ([num_rows] on the device). One block per (row, head); fp32 throughout.
void seq2seq_attention(const Seq2SeqAttentionArgs& args, const Seq2SeqAttentionRow* rows,
                       int num_rows, cudaStream_t stream);

// y[r * stride + i] += bias[i] for r < rows, i < n.
void add_bias_rows(float* y, int rows, int n, int stride, const float* bias, cudaStream_t stream);

// (precision) dst[r][offset + i] = src[r * src_stride + i] for r < rows, i < width; dst
// ([rows] on the device) holds each row's destination, 16-bit elements.
void store_rows16(const float* src, int src_stride, int width, void* const* dst, std::size_t offset,
                  int rows, Precision precision, cudaStream_t stream);

// x[t] = x[t] * scale (+ table[table_rows[t]] when table is not null), fp32, hidden wide.
void scale_add_rows(float* x, int tokens, int hidden, float scale, const float* table,
                    const std::int32_t* table_rows, cudaStream_t stream);

}  // namespace weft::cuda
