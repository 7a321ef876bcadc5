#pragma once
// CudaSeq2Seq's state: device weights, the relative bias and position tables, step buffers
// and the live requests' caches. Shared by cuda_seq2seq_load.cpp (upload) and
// cuda_seq2seq.cpp (forward pass); host code only.

#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/seq2seq.hpp"
#include "runtime/model/cuda/cuda_common.hpp"
#include "runtime/model/cuda/cuda_seq2seq.hpp"
#include "runtime/model/cuda/device_buffer.hpp"
#include "runtime/model/cuda/weight_upload.hpp"

namespace weft::model {

using cuda_detail::cuda_error;
using cuda_detail::kernel_activation;

struct CudaSeq2Seq::State {
  using DeviceBuffer = cuda_detail::DeviceBuffer;

  struct Norm {
    DeviceBuffer weight, bias;  // fp32; bias unset for RMS norms
  };
  struct Attention {
    DeviceBuffer qkv, qkv_bias, o, o_bias;  // q, k, v rows in one matrix; biases fp32
  };
  struct Mlp {
    DeviceBuffer up, up_bias, down, down_bias;  // up: [gate | up] rows when gated
  };
  struct EncoderLayer {
    Norm attn_norm, mlp_norm;
    Attention attn;
    Mlp mlp;
  };
  struct DecoderLayer {
    Norm attn_norm, cross_norm, mlp_norm;
    Attention self;
    DeviceBuffer cross_q, cross_q_bias, cross_o, cross_o_bias;
    Mlp mlp;
  };
  struct Request {
    // 16-bit [position][layer][k | v][inner]: encoder tokens, decoder positions.
    DeviceBuffer cross, self;
    int source_length = 0;
    int max_tokens = 0;
    int position = 0;  // the next decoder position
  };

  const Seq2SeqModel* model = nullptr;
  CudaSeq2SeqOptions options;
  cudaStream_t stream = nullptr;
  std::unique_ptr<cuda::Blas> blas;
  std::size_t weight_bytes = 0;

  DeviceBuffer embedding, lm_head;          // lm_head unset when tied (the embedding serves)
  DeviceBuffer encoder_bias, decoder_bias;  // [heads][2 * bias_radius + 1] fp32 (T5)
  int bias_radius = 0;
  std::vector<EncoderLayer> encoder_layers;
  std::vector<DecoderLayer> decoder_layers;
  DeviceBuffer cross_kv, cross_kv_bias;  // [layers * 2 * inner, hidden]; [layers * 2 * inner]
  Norm encoder_final_norm, decoder_final_norm;
  DeviceBuffer positions;  // M2M100's sinusoidal rows, fp32 [position_rows, hidden]
  int position_rows = 0;
  DeviceBuffer staging;  // raw weight bytes on their way to `precision`

  int capacity_tokens = 0;
  DeviceBuffer x, h, wide, attn, delta, mlp, act;  // see reserve_step
  DeviceBuffer tokens_d, table_rows_d, rows_d, cross_rows_d, dst_d;
  DeviceBuffer logits_d, hidden_d;
  // The engine's paged steps (cuda_seq2seq_paged.cpp): the rows' page tables, and the rows
  // the lm head reads when a step has more rows than logit rows (16-bit, hidden wide).
  DeviceBuffer pages_d, head_in;
  DeviceBuffer pool;  // the engine's pages (make_page_pool), pool_pages of page_size positions
  int pool_pages = 0;
  int page_size = 0;

  std::map<int, Request> requests;
  int next_id = 0;

  ~State();

  // The uploads of weight_upload.hpp, through `stream` and `staging`.
  cuda_detail::WeightUpload uploads();
  Result<void> upload_floats(const std::vector<float>& v, DeviceBuffer& dst);
  Result<void> upload_matrix(const cpu::WeightMatrix& w, DeviceBuffer& dst, std::size_t row_offset,
                             std::size_t total_rows);
  // The norm's weight (and bias) times `scale`.
  Result<void> upload_norm(const Seq2SeqModel::Norm& n, Norm& dst, float scale = 1.0f);
  Result<void> upload_mlp(const Seq2SeqModel::Mlp& m, bool gated, std::size_t width, Mlp& dst);
  Result<void> upload_self_attention(const Seq2SeqModel::Attention& a, std::size_t inner,
                                     Attention& dst);
  // T5's [buckets][heads] table as [heads][distance] for the kernel (seq2seq.hpp).
  Result<void> make_bias_table(const std::vector<float>& buckets, int heads, bool bidirectional,
                               DeviceBuffer& dst);
  // The sinusoidal table holds at least `rows` rows.
  Result<void> ensure_positions(int rows);
  // Step buffers for `tokens` rows.
  Result<void> reserve_step(int tokens);
};

// The forward pass's parts, shared by the requests' own caches (cuda_seq2seq.cpp) and the
// engine's pool of pages (cuda_seq2seq_paged.cpp). Each enqueues work on s.stream and returns
// false when a cuBLAS product failed.
//
// The encoder over T packed tokens (tokens_d, table_rows_d and rows_d uploaded, rows_d's rows
// reading keys from `wide`; `longest` the longest source): its last hidden states, after the
// final norm, in h.
bool seq2seq_encoder_pass(CudaSeq2Seq::State& s, int T, int longest);
// Every decoder layer's cross keys and values of h's T rows, into the cache rows dst_d holds
// (one per row, [layer][k | v][inner]).
bool seq2seq_cross_kv_pass(CudaSeq2Seq::State& s, int T);
// One decoder pass over R rows: tokens_d, table_rows_d, rows_d (self-attention, keys of the
// row's own position stored first, through dst_d's cache rows) and cross_rows_d uploaded;
// page_size for rows with page tables. The last hidden states (final norm) in h.
bool seq2seq_decoder_pass(CudaSeq2Seq::State& s, int R, int longest_self, int longest_cross,
                          int page_size);
// The lm head over `rows` 16-bit rows of `input` into logits_d (reserved by the caller).
bool seq2seq_lm_head_pass(CudaSeq2Seq::State& s, const void* input, int rows);

// Copies a step's metadata to the device on the model's stream. From pageable memory: the
// call returns once `host` is staged, so it may go away after.
template <class T>
Result<void> upload_step_data(const std::vector<T>& host, cuda_detail::DeviceBuffer& dst,
                              cudaStream_t stream) {
  if (host.empty()) return {};
  if (auto err = cudaMemcpyAsync(dst.get(), host.data(), host.size() * sizeof(T),
                                 cudaMemcpyHostToDevice, stream);
      err != cudaSuccess) {
    return cuda_error(err, "uploading a step's metadata");
  }
  return {};
}

// The sinusoidal row a token reads (M2M100): the pad token the zero row, else pad + 1 + i.
inline std::int32_t seq2seq_position_row(const ModelSpec& spec, std::int32_t token, int position) {
  const int pad = spec.seq2seq.position_padding_idx;
  return token == pad ? pad : pad + 1 + position;
}

}  // namespace weft::model
