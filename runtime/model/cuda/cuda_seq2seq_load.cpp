// CudaSeq2Seq: the weights' upload and the tables made once (cuda_seq2seq.hpp). The forward
// pass is in cuda_seq2seq.cpp.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/model/cuda/cuda_seq2seq_state.hpp"
#include "runtime/model/seq2seq_positions.hpp"

namespace weft::model {

using cuda_detail::DeviceBuffer;

namespace {

// Concatenates bias vectors of the given widths (empty ones as zeros); empty when all are.
std::vector<float> concat_biases(const std::vector<const std::vector<float>*>& parts,
                                 const std::vector<std::size_t>& widths) {
  bool any = false;
  for (const auto* p : parts)
    any = any || !p->empty();
  if (!any) return {};
  std::vector<float> out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (parts[i]->empty()) {
      out.insert(out.end(), widths[i], 0.0f);
    } else {
      out.insert(out.end(), parts[i]->begin(), parts[i]->end());
    }
  }
  return out;
}

}  // namespace

CudaSeq2Seq::State::~State() {
  if (stream != nullptr) {
    cudaSetDevice(options.device);
    cudaStreamSynchronize(stream);
    requests.clear();
    cudaStreamDestroy(stream);
  }
}

cuda_detail::WeightUpload CudaSeq2Seq::State::uploads() {
  return {stream, options.precision, &staging, &weight_bytes};
}

Result<void> CudaSeq2Seq::State::upload_floats(const std::vector<float>& v, DeviceBuffer& dst) {
  return cuda_detail::upload_floats(stream, weight_bytes, v, dst);
}

Result<void> CudaSeq2Seq::State::upload_matrix(const cpu::WeightMatrix& w, DeviceBuffer& dst,
                                               std::size_t row_offset, std::size_t total_rows) {
  return cuda_detail::upload_matrix(uploads(), w, dst, row_offset, total_rows);
}

Result<void> CudaSeq2Seq::State::upload_norm(const Seq2SeqModel::Norm& n, Norm& dst, float scale) {
  std::vector<float> w = n.weight;
  for (float& v : w)
    v *= scale;
  std::vector<float> b = n.bias;
  for (float& v : b)
    v *= scale;
  if (auto r = upload_floats(w, dst.weight); !r) return r;
  return upload_floats(b, dst.bias);
}

Result<void> CudaSeq2Seq::State::upload_mlp(const Seq2SeqModel::Mlp& m, bool gated,
                                            std::size_t width, Mlp& dst) {
  if (gated) {
    // One [2 * width, hidden] product: the gate's rows, then up's (mlp_activation's layout).
    const auto bias = concat_biases({&m.gate_bias, &m.up_bias}, {width, width});
    const Result<void> steps[] = {upload_matrix(m.gate, dst.up, 0, 2 * width),
                                  upload_matrix(m.up, dst.up, width, 2 * width),
                                  upload_floats(bias, dst.up_bias)};
    for (const auto& r : steps) {
      if (!r) return r;
    }
  } else {
    const Result<void> steps[] = {upload_matrix(m.up, dst.up, 0, width),
                                  upload_floats(m.up_bias, dst.up_bias)};
    for (const auto& r : steps) {
      if (!r) return r;
    }
  }
  if (auto r = upload_matrix(m.down, dst.down, 0, m.down.rows); !r) return r;
  return upload_floats(m.down_bias, dst.down_bias);
}

Result<void> CudaSeq2Seq::State::upload_self_attention(const Seq2SeqModel::Attention& a,
                                                       std::size_t inner, Attention& dst) {
  const auto bias = concat_biases({&a.q_bias, &a.k_bias, &a.v_bias}, {inner, inner, inner});
  const Result<void> steps[] = {upload_matrix(a.q, dst.qkv, 0, 3 * inner),
                                upload_matrix(a.k, dst.qkv, inner, 3 * inner),
                                upload_matrix(a.v, dst.qkv, 2 * inner, 3 * inner),
                                upload_floats(bias, dst.qkv_bias),
                                upload_matrix(a.o, dst.o, 0, a.o.rows),
                                upload_floats(a.o_bias, dst.o_bias)};
  for (const auto& r : steps) {
    if (!r) return r;
  }
  return {};
}

Result<void> CudaSeq2Seq::State::make_bias_table(const std::vector<float>& buckets, int heads,
                                                 bool bidirectional, DeviceBuffer& dst) {
  const auto& e = model->spec().seq2seq;
  // Distances at or beyond max_distance all share the direction's last bucket, so the table
  // covers twice max_distance each way and the kernel clamps longer ones to its ends.
  bias_radius = std::max(2 * e.relative_max_distance, e.relative_buckets);
  const int r = bias_radius;
  for (const int sign : {-1, 1}) {
    if (sign > 0 && !bidirectional) continue;
    const int at_edge = relative_position_bucket(sign * r, bidirectional, e.relative_buckets,
                                                 e.relative_max_distance);
    const int far = relative_position_bucket(sign * 64 * r, bidirectional, e.relative_buckets,
                                             e.relative_max_distance);
    if (at_edge != far) {
      return Error(ErrorCode::kUnsupported,
                   model->spec().architecture +
                       ": relative position buckets do not saturate by distance " +
                       std::to_string(r) + " (relative_attention_max_distance " +
                       std::to_string(e.relative_max_distance) +
                       "); the CUDA encoder-decoder model needs them to");
    }
  }
  const auto width = static_cast<std::size_t>(2 * r + 1);
  std::vector<float> table(static_cast<std::size_t>(heads) * width);
  for (int rel = -r; rel <= r; ++rel) {
    const auto bucket = static_cast<std::size_t>(
        relative_position_bucket(rel, bidirectional, e.relative_buckets, e.relative_max_distance));
    for (int head = 0; head < heads; ++head) {
      table[static_cast<std::size_t>(head) * width + static_cast<std::size_t>(rel + r)] =
          buckets[bucket * static_cast<std::size_t>(heads) + static_cast<std::size_t>(head)];
    }
  }
  return upload_floats(table, dst);
}

Result<void> CudaSeq2Seq::State::ensure_positions(int rows) {
  const ModelSpec& spec = model->spec();
  if (spec.position != PositionEmbedding::kSinusoidal || rows <= position_rows) return {};
  const int want = std::max({rows, 2 * position_rows, 1024});
  const auto H = static_cast<std::size_t>(spec.hidden_size);
  std::vector<float> table(static_cast<std::size_t>(want) * H);
  for (int r = 0; r < want; ++r) {
    sinusoidal_position(r, H, spec.seq2seq.position_padding_idx,
                        table.data() + static_cast<std::size_t>(r) * H);
  }
  // Kernels of an earlier call may still read the old table: reserve frees it only after
  // cudaFree's implicit synchronization.
  positions.reset();
  if (auto r = upload_floats(table, positions); !r) return r;
  position_rows = want;
  return {};
}

Result<void> CudaSeq2Seq::State::reserve_step(int tokens) {
  if (tokens <= capacity_tokens) return {};
  const ModelSpec& spec = model->spec();
  const auto& e = spec.seq2seq;
  const auto T = static_cast<std::size_t>(tokens);
  const auto H = static_cast<std::size_t>(spec.hidden_size);
  const auto QDe = static_cast<std::size_t>(e.encoder_heads) * e.encoder_head_dim;
  const auto QD = static_cast<std::size_t>(spec.num_heads) * spec.head_dim;
  const std::size_t W = std::max(QDe, QD);
  const std::size_t I =
      static_cast<std::size_t>(std::max(e.encoder_intermediate_size, spec.intermediate_size));
  const std::size_t gated = spec.gated_mlp ? 2 : 1;
  const std::size_t half = cuda::kHalfBytes;
  auto r =
      cuda_detail::reserve_step_buffers({{&x, T * H * 4},
                                         {&h, T * H * half},
                                         {&wide, T * std::max(3 * W, 2 * QD) * 4},
                                         {&attn, T * W * half},
                                         {&delta, T * H * 4},
                                         {&mlp, T * gated * I * 4},
                                         {&act, T * I * half},
                                         {&tokens_d, T * 4},
                                         {&table_rows_d, T * 4},
                                         {&rows_d, T * sizeof(cuda::Seq2SeqAttentionRow)},
                                         {&cross_rows_d, T * sizeof(cuda::Seq2SeqAttentionRow)},
                                         {&dst_d, T * sizeof(void*)}},
                                        tokens);
  if (r) capacity_tokens = tokens;
  return r;
}

CudaSeq2Seq::CudaSeq2Seq(std::unique_ptr<State> state) : state_(std::move(state)) {}
CudaSeq2Seq::~CudaSeq2Seq() = default;

std::size_t CudaSeq2Seq::weight_bytes() const noexcept {
  return state_->weight_bytes;
}

std::string CudaSeq2Seq::describe() const {
  return cuda_detail::describe_backend(state_->options.device, state_->options.precision);
}

Result<std::unique_ptr<CudaSeq2Seq>> CudaSeq2Seq::create(const Seq2SeqModel& model,
                                                         const CudaSeq2SeqOptions& options) {
  const ModelSpec& spec = model.spec();
  const auto& e = spec.seq2seq;
  for (const int hd : {spec.head_dim, e.encoder_head_dim}) {
    if (hd > cuda::kSeq2SeqMaxHeadDim) {
      return Error(ErrorCode::kUnsupported, spec.architecture + ": head_dim " + std::to_string(hd) +
                                                " is above the CUDA encoder-decoder attention's " +
                                                std::to_string(cuda::kSeq2SeqMaxHeadDim));
    }
  }
  if (model.lm_head().quantized()) {
    return Error(ErrorCode::kUnsupported,
                 spec.architecture + ": quantized encoder-decoder weights on CUDA");
  }
  if (auto selected = cuda_detail::select_device(options.device); !selected) {
    return selected.error();
  }
  auto s = std::make_unique<State>();
  s->model = &model;
  s->options = options;
  if (auto err = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking); err != cudaSuccess) {
    return cuda_error(err, "creating a stream");
  }
  s->blas = std::make_unique<cuda::Blas>();
  if (!s->blas->error().empty()) {
    return Error(ErrorCode::kInternal, "cuBLAS: " + s->blas->error());
  }
  const TensorView& table = model.embedding();
  const auto embedding_count = static_cast<std::size_t>(table.numel());
  if (auto r = cuda_detail::upload16(s->uploads(), table.data, table.dtype, embedding_count,
                                     s->embedding, 0, embedding_count);
      !r) {
    return r.error();
  }
  if (!spec.tied_embeddings) {
    const auto& head = model.lm_head();
    if (auto r = s->upload_matrix(head, s->lm_head, 0, head.rows); !r) return r.error();
  }
  if (spec.position == PositionEmbedding::kRelativeBuckets) {
    if (auto r = s->make_bias_table(model.encoder_relative_bias(), e.encoder_heads, true,
                                    s->encoder_bias);
        !r) {
      return r.error();
    }
    if (auto r = s->make_bias_table(model.decoder_relative_bias(), spec.num_heads, false,
                                    s->decoder_bias);
        !r) {
      return r.error();
    }
  }
  const auto QDe = static_cast<std::size_t>(e.encoder_heads) * e.encoder_head_dim;
  const auto QD = static_cast<std::size_t>(spec.num_heads) * spec.head_dim;
  s->encoder_layers.resize(model.encoder_layers().size());
  for (std::size_t i = 0; i < model.encoder_layers().size(); ++i) {
    const auto& L = model.encoder_layers()[i];
    auto& D = s->encoder_layers[i];
    const Result<void> steps[] = {
        s->upload_norm(L.attn_norm, D.attn_norm), s->upload_self_attention(L.attn, QDe, D.attn),
        s->upload_norm(L.mlp_norm, D.mlp_norm),
        s->upload_mlp(L.mlp, spec.gated_mlp, static_cast<std::size_t>(e.encoder_intermediate_size),
                      D.mlp)};
    for (const auto& r : steps) {
      if (!r) return r.error();
    }
  }
  const auto layers = model.decoder_layers().size();
  s->decoder_layers.resize(layers);
  std::vector<float> cross_bias;
  bool any_cross_bias = false;
  for (std::size_t i = 0; i < layers; ++i) {
    const auto& L = model.decoder_layers()[i];
    auto& D = s->decoder_layers[i];
    const Result<void> steps[] = {
        s->upload_norm(L.attn_norm, D.attn_norm), s->upload_self_attention(L.self, QD, D.self),
        s->upload_norm(L.cross_norm, D.cross_norm), s->upload_matrix(L.cross.q, D.cross_q, 0, QD),
        s->upload_floats(L.cross.q_bias, D.cross_q_bias),
        s->upload_matrix(L.cross.o, D.cross_o, 0, L.cross.o.rows),
        s->upload_floats(L.cross.o_bias, D.cross_o_bias),
        // Every layer's cross keys and values in one [layers * 2 * inner, hidden] matrix, so
        // layer l's rows are its [k | v] slice of a cache row.
        s->upload_matrix(L.cross.k, s->cross_kv, (2 * i) * QD, 2 * layers * QD),
        s->upload_matrix(L.cross.v, s->cross_kv, (2 * i + 1) * QD, 2 * layers * QD),
        s->upload_norm(L.mlp_norm, D.mlp_norm),
        s->upload_mlp(L.mlp, spec.gated_mlp, static_cast<std::size_t>(spec.intermediate_size),
                      D.mlp)};
    for (const auto& r : steps) {
      if (!r) return r.error();
    }
    const auto part = concat_biases({&L.cross.k_bias, &L.cross.v_bias}, {QD, QD});
    any_cross_bias = any_cross_bias || !part.empty();
    if (part.empty()) {
      cross_bias.insert(cross_bias.end(), 2 * QD, 0.0f);
    } else {
      cross_bias.insert(cross_bias.end(), part.begin(), part.end());
    }
  }
  if (any_cross_bias) {
    if (auto r = s->upload_floats(cross_bias, s->cross_kv_bias); !r) return r.error();
  }
  // T5's d_model^-0.5 before the lm head, folded into the final norm's weight.
  const Result<void> norms[] = {s->upload_norm(model.encoder_final_norm(), s->encoder_final_norm),
                                s->upload_norm(model.decoder_final_norm(), s->decoder_final_norm,
                                               static_cast<float>(e.lm_head_scale))};
  for (const auto& r : norms) {
    if (!r) return r.error();
  }
  s->staging.reset();
  if (auto r = s->reserve_step(64); !r) return r.error();
  return std::unique_ptr<CudaSeq2Seq>(new CudaSeq2Seq(std::move(s)));
}

}  // namespace weft::model
