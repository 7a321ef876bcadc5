// CudaSeq2Seq's forward pass: the encoder over new requests' sources with their cross-attention
// keys and values, and decoder steps (cuda_seq2seq.hpp).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "kernels/cuda/activation.hpp"
#include "kernels/cuda/convert.hpp"
#include "kernels/cuda/embedding.hpp"
#include "kernels/cuda/norm.hpp"
#include "runtime/model/cuda/cuda_seq2seq_state.hpp"

namespace weft::model {
namespace {

Error bad_input(const std::string& what) {
  return Error(ErrorCode::kInvalidArgument, what);
}

float attention_scale(const ModelSpec& spec, int head_dim) {
  const double s = spec.seq2seq.attention_scale;
  return s > 0 ? static_cast<float>(s) : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

}  // namespace

// One pre-norm sub-block's tail: residual += delta (+ bias), h = norm(residual).
static void add_norm(CudaSeq2Seq::State& s, int rows, const float* delta, const float* delta_bias,
                     const CudaSeq2Seq::State::Norm& norm) {
  const ModelSpec& spec = s.model->spec();
  cuda::AddNormArgs a;
  a.residual = s.x.as<float>();
  a.delta = delta;
  a.delta_bias = delta_bias;
  a.rows = rows;
  a.n = spec.hidden_size;
  a.kind = spec.norm == model::Norm::kRms ? cuda::NormKind::kRms : cuda::NormKind::kLayer;
  a.weight = norm.weight.as<float>();
  a.bias = norm.bias.as<float>();
  a.eps = static_cast<float>(spec.norm_epsilon);
  a.write_back = true;
  a.out = s.h.get();
  a.precision = s.options.precision;
  cuda::add_norm(a, s.stream);
}

// h [rows, hidden] through the MLP into delta [rows, hidden] (fp32, before its bias).
static bool run_mlp(CudaSeq2Seq::State& s, int rows, const CudaSeq2Seq::State::Mlp& m, int width) {
  const ModelSpec& spec = s.model->spec();
  const int H = spec.hidden_size;
  const int up_rows = spec.gated_mlp ? 2 * width : width;
  const cuda::Precision P = s.options.precision;
  bool ok = s.blas->linear(s.h.get(), rows, m.up.get(), up_rows, H, s.mlp.as<float>(), up_rows, P,
                           s.stream);
  cuda::mlp_activation(kernel_activation(spec.activation), spec.gated_mlp, s.mlp.as<float>(),
                       m.up_bias.as<float>(), rows, width, s.act.get(), P, s.stream);
  ok &= s.blas->linear(s.act.get(), rows, m.down.get(), H, width, s.delta.as<float>(), H, P,
                       s.stream);
  return ok;
}

bool seq2seq_encoder_pass(CudaSeq2Seq::State& s, int T, int longest) {
  const ModelSpec& spec = s.model->spec();
  const auto& e = spec.seq2seq;
  const int H = spec.hidden_size;
  const int QDe = e.encoder_heads * e.encoder_head_dim;
  const cuda::Precision P = s.options.precision;
  float* wide = s.wide.as<float>();
  cudaStream_t stream = s.stream;
  float* x = s.x.as<float>();
  cuda::embedding_gather(s.embedding.get(), P, s.tokens_d.as<std::int32_t>(), T, H, x, stream);
  const bool sinusoidal = spec.position == PositionEmbedding::kSinusoidal;
  if (sinusoidal || spec.embedding_scale != 1.0) {
    cuda::scale_add_rows(x, T, H, static_cast<float>(spec.embedding_scale),
                         sinusoidal ? s.positions.as<float>() : nullptr,
                         s.table_rows_d.as<std::int32_t>(), stream);
  }
  bool ok = true;
  add_norm(s, T, nullptr, nullptr, s.encoder_layers.front().attn_norm);
  for (std::size_t l = 0; l < s.encoder_layers.size(); ++l) {
    const auto& Ly = s.encoder_layers[l];
    ok &= s.blas->linear(s.h.get(), T, Ly.attn.qkv.get(), 3 * QDe, H, wide, 3 * QDe, P, stream);
    cuda::add_bias_rows(wide, T, 3 * QDe, 3 * QDe, Ly.attn.qkv_bias.as<float>(), stream);
    cuda::Seq2SeqAttentionArgs a;
    a.q = wide;
    a.q_stride = 3 * QDe;
    a.kv = cuda::KvSource::kF32;
    a.k_offset = static_cast<std::size_t>(QDe);
    a.v_offset = static_cast<std::size_t>(2 * QDe);
    a.kv_stride = static_cast<std::size_t>(3 * QDe);
    a.num_heads = e.encoder_heads;
    a.head_dim = e.encoder_head_dim;
    a.scale = attention_scale(spec, e.encoder_head_dim);
    a.position_bias = s.encoder_bias.as<float>();
    a.bias_radius = s.bias_radius;
    a.max_keys = longest;
    a.out = s.attn.get();
    a.precision = P;
    cuda::seq2seq_attention(a, s.rows_d.as<cuda::Seq2SeqAttentionRow>(), T, stream);
    ok &=
        s.blas->linear(s.attn.get(), T, Ly.attn.o.get(), H, QDe, s.delta.as<float>(), H, P, stream);
    add_norm(s, T, s.delta.as<float>(), Ly.attn.o_bias.as<float>(), Ly.mlp_norm);
    ok &= run_mlp(s, T, Ly.mlp, e.encoder_intermediate_size);
    const bool last = l + 1 == s.encoder_layers.size();
    add_norm(s, T, s.delta.as<float>(), Ly.mlp.down_bias.as<float>(),
             last ? s.encoder_final_norm : s.encoder_layers[l + 1].attn_norm);
  }
  return ok;
}

bool seq2seq_cross_kv_pass(CudaSeq2Seq::State& s, int T) {
  const ModelSpec& spec = s.model->spec();
  const int H = spec.hidden_size;
  const int L = spec.num_layers;
  const int QD = spec.num_heads * spec.head_dim;
  const cuda::Precision P = s.options.precision;
  cudaStream_t stream = s.stream;
  float* wide = s.wide.as<float>();
  bool ok = true;
  // Every decoder layer's cross keys and values: layer l's [k | v] columns of each cache row.
  for (int l = 0; l < L; ++l) {
    const std::size_t first = static_cast<std::size_t>(l) * 2 * QD;
    ok &= s.blas->linear(s.h.get(), T, s.cross_kv.as<std::byte>() + first * H * cuda::kHalfBytes,
                         2 * QD, H, wide, 2 * QD, P, stream);
    if (s.cross_kv_bias.get() != nullptr) {
      cuda::add_bias_rows(wide, T, 2 * QD, 2 * QD, s.cross_kv_bias.as<float>() + first, stream);
    }
    cuda::store_rows16(wide, 2 * QD, 2 * QD, s.dst_d.as<void*>(), first, T, P, stream);
  }
  return ok;
}

bool seq2seq_decoder_pass(CudaSeq2Seq::State& s, int R, int longest_self, int longest_cross,
                          int page_size) {
  const ModelSpec& spec = s.model->spec();
  const int H = spec.hidden_size;
  const int L = spec.num_layers;
  const int QD = spec.num_heads * spec.head_dim;
  const std::size_t cache_row = static_cast<std::size_t>(2) * L * QD;
  const cuda::Precision P = s.options.precision;
  cudaStream_t stream = s.stream;
  float* x = s.x.as<float>();
  float* wide = s.wide.as<float>();
  float* delta = s.delta.as<float>();
  cuda::embedding_gather(s.embedding.get(), P, s.tokens_d.as<std::int32_t>(), R, H, x, stream);
  const bool sinusoidal = spec.position == PositionEmbedding::kSinusoidal;
  if (sinusoidal || spec.embedding_scale != 1.0) {
    cuda::scale_add_rows(x, R, H, static_cast<float>(spec.embedding_scale),
                         sinusoidal ? s.positions.as<float>() : nullptr,
                         s.table_rows_d.as<std::int32_t>(), stream);
  }
  const cuda::KvSource kv =
      P == cuda::Precision::kBF16 ? cuda::KvSource::kBF16 : cuda::KvSource::kF16;
  const float scale = attention_scale(spec, spec.head_dim);
  bool ok = true;
  add_norm(s, R, nullptr, nullptr, s.decoder_layers.front().attn_norm);
  for (int l = 0; l < L; ++l) {
    const auto& Ly = s.decoder_layers[static_cast<std::size_t>(l)];
    const std::size_t k_at = static_cast<std::size_t>(l) * 2 * QD;
    // Causal self-attention: this step's keys and values into the cache, then over it.
    ok &= s.blas->linear(s.h.get(), R, Ly.self.qkv.get(), 3 * QD, H, wide, 3 * QD, P, stream);
    cuda::add_bias_rows(wide, R, 3 * QD, 3 * QD, Ly.self.qkv_bias.as<float>(), stream);
    cuda::store_rows16(wide + QD, 3 * QD, QD, s.dst_d.as<void*>(), k_at, R, P, stream);
    cuda::store_rows16(wide + 2 * QD, 3 * QD, QD, s.dst_d.as<void*>(), k_at + QD, R, P, stream);
    cuda::Seq2SeqAttentionArgs a;
    a.q = wide;
    a.q_stride = 3 * QD;
    a.kv = kv;
    a.k_offset = k_at;
    a.v_offset = k_at + QD;
    a.kv_stride = cache_row;
    a.num_heads = spec.num_heads;
    a.head_dim = spec.head_dim;
    a.scale = scale;
    a.position_bias = s.decoder_bias.as<float>();
    a.bias_radius = s.bias_radius;
    a.max_keys = longest_self;
    a.out = s.attn.get();
    a.precision = P;
    a.page_size = page_size;
    cuda::seq2seq_attention(a, s.rows_d.as<cuda::Seq2SeqAttentionRow>(), R, stream);
    ok &= s.blas->linear(s.attn.get(), R, Ly.self.o.get(), H, QD, delta, H, P, stream);
    add_norm(s, R, delta, Ly.self.o_bias.as<float>(), Ly.cross_norm);

    // Cross-attention over the request's encoder output (no positions, no mask).
    ok &= s.blas->linear(s.h.get(), R, Ly.cross_q.get(), QD, H, wide, QD, P, stream);
    cuda::add_bias_rows(wide, R, QD, QD, Ly.cross_q_bias.as<float>(), stream);
    a.q_stride = QD;
    a.position_bias = nullptr;
    a.bias_radius = 0;
    a.max_keys = longest_cross;
    cuda::seq2seq_attention(a, s.cross_rows_d.as<cuda::Seq2SeqAttentionRow>(), R, stream);
    ok &= s.blas->linear(s.attn.get(), R, Ly.cross_o.get(), H, QD, delta, H, P, stream);
    add_norm(s, R, delta, Ly.cross_o_bias.as<float>(), Ly.mlp_norm);

    ok &= run_mlp(s, R, Ly.mlp, spec.intermediate_size);
    const bool last = l + 1 == L;
    add_norm(
        s, R, delta, Ly.mlp.down_bias.as<float>(),
        last ? s.decoder_final_norm : s.decoder_layers[static_cast<std::size_t>(l + 1)].attn_norm);
  }
  return ok;
}

bool seq2seq_lm_head_pass(CudaSeq2Seq::State& s, const void* input, int rows) {
  const ModelSpec& spec = s.model->spec();
  const void* head = s.lm_head.get() != nullptr ? s.lm_head.get() : s.embedding.get();
  return s.blas->linear(input, rows, head, spec.vocab_size, spec.hidden_size,
                        s.logits_d.as<float>(), spec.vocab_size, s.options.precision, s.stream);
}

Result<std::vector<int>> CudaSeq2Seq::start(const std::vector<std::vector<std::int32_t>>& sources,
                                            int max_decoder_tokens) {
  return start(sources, max_decoder_tokens, nullptr);
}

Result<std::vector<int>> CudaSeq2Seq::start(const std::vector<std::vector<std::int32_t>>& sources,
                                            int max_decoder_tokens,
                                            std::vector<float>* encoder_hidden) {
  State& s = *state_;
  const ModelSpec& spec = s.model->spec();
  const auto& e = spec.seq2seq;
  if (max_decoder_tokens <= 0 || max_decoder_tokens > cuda::kSeq2SeqMaxKeys) {
    return bad_input("a request's decoder positions must be in [1, " +
                     std::to_string(cuda::kSeq2SeqMaxKeys) + "], not " +
                     std::to_string(max_decoder_tokens));
  }
  int T = 0, longest = 0;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const auto& src = sources[i];
    const std::string where = "source " + std::to_string(i) + ": ";
    if (src.empty()) return bad_input(where + "is empty");
    if (src.size() > static_cast<std::size_t>(cuda::kSeq2SeqMaxKeys)) {
      return bad_input(where + std::to_string(src.size()) +
                       " tokens is more than the CUDA encoder-decoder attention's " +
                       std::to_string(cuda::kSeq2SeqMaxKeys));
    }
    for (const auto id : src) {
      if (id < 0 || id >= spec.vocab_size) {
        return bad_input(where + "token id " + std::to_string(id) +
                         " is outside the vocabulary [0, " + std::to_string(spec.vocab_size) + ")");
      }
    }
    T += static_cast<int>(src.size());
    longest = std::max(longest, static_cast<int>(src.size()));
  }
  if (sources.empty()) return std::vector<int>{};
  if (auto err = cudaSetDevice(s.options.device); err != cudaSuccess) {
    return cuda_error(err, "selecting device " + std::to_string(s.options.device));
  }

  const int H = spec.hidden_size;
  const int L = spec.num_layers;
  const int QDe = e.encoder_heads * e.encoder_head_dim;
  const int QD = spec.num_heads * spec.head_dim;
  const std::size_t cache_row = static_cast<std::size_t>(2) * L * QD;  // elements a position
  const cuda::Precision P = s.options.precision;

  // The requests' caches first: running out of device memory refuses them before any work.
  std::vector<State::Request> made(sources.size());
  for (std::size_t i = 0; i < sources.size(); ++i) {
    auto& r = made[i];
    r.source_length = static_cast<int>(sources[i].size());
    r.max_tokens = max_decoder_tokens;
    const std::size_t cross_bytes = r.source_length * cache_row * cuda::kHalfBytes;
    const std::size_t self_bytes =
        static_cast<std::size_t>(max_decoder_tokens) * cache_row * cuda::kHalfBytes;
    if (auto err = r.cross.reserve(cross_bytes); err != cudaSuccess) {
      return cuda_error(err, "allocating " + std::to_string(cross_bytes) +
                                 " bytes of cross-attention cache for source " + std::to_string(i));
    }
    if (auto err = r.self.reserve(self_bytes); err != cudaSuccess) {
      return cuda_error(err, "allocating " + std::to_string(self_bytes) +
                                 " bytes of self-attention cache for source " + std::to_string(i) +
                                 " (" + std::to_string(max_decoder_tokens) + " positions)");
    }
  }
  if (auto r = s.reserve_step(T); !r) return r.error();
  if (auto r = s.ensure_positions(e.position_padding_idx + 2 + longest); !r) return r.error();

  // Metadata: tokens, sinusoidal rows, each token's attention row (its source's keys in the
  // qkv product) and the cross cache row its keys and values go to.
  std::vector<std::int32_t> tokens, table_rows;
  std::vector<cuda::Seq2SeqAttentionRow> rows;
  std::vector<void*> dst;
  float* wide = s.wide.as<float>();
  for (std::size_t i = 0, at = 0; i < sources.size(); ++i) {
    const auto& src = sources[i];
    for (std::size_t j = 0; j < src.size(); ++j) {
      tokens.push_back(src[j]);
      table_rows.push_back(seq2seq_position_row(spec, src[j], static_cast<int>(j)));
      cuda::Seq2SeqAttentionRow row;
      row.base = wide + at * 3 * static_cast<std::size_t>(QDe);
      row.num_keys = static_cast<std::int32_t>(src.size());
      row.query_position = static_cast<std::int32_t>(j);
      rows.push_back(row);
      dst.push_back(made[i].cross.as<std::byte>() + j * cache_row * cuda::kHalfBytes);
    }
    at += src.size();
  }
  const Result<void> uploads[] = {upload_step_data(tokens, s.tokens_d, s.stream),
                                  upload_step_data(table_rows, s.table_rows_d, s.stream),
                                  upload_step_data(rows, s.rows_d, s.stream),
                                  upload_step_data(dst, s.dst_d, s.stream)};
  for (const auto& r : uploads) {
    if (!r) return r.error();
  }

  cudaStream_t stream = s.stream;
  bool ok = seq2seq_encoder_pass(s, T, longest);
  if (encoder_hidden != nullptr) {
    const std::size_t n = static_cast<std::size_t>(T) * H;
    if (auto err = s.hidden_d.reserve(n * sizeof(float)); err != cudaSuccess) {
      return cuda_error(err, "allocating the encoder output's copy");
    }
    cuda::convert_to_f32(s.h.get(), P, s.hidden_d.as<float>(), n, stream);
  }
  ok &= seq2seq_cross_kv_pass(s, T);
  if (!ok) return Error(ErrorCode::kInternal, "cuBLAS: a matrix product failed in the encoder");
  if (auto err = cudaGetLastError(); err != cudaSuccess) {
    return cuda_error(err, "launching the encoder's kernels");
  }
  if (encoder_hidden != nullptr) {
    encoder_hidden->resize(static_cast<std::size_t>(T) * H);
    if (auto err =
            cudaMemcpyAsync(encoder_hidden->data(), s.hidden_d.get(),
                            encoder_hidden->size() * sizeof(float), cudaMemcpyDeviceToHost, stream);
        err != cudaSuccess) {
      return cuda_error(err, "copying the encoder output back");
    }
  }
  if (auto err = cudaStreamSynchronize(stream); err != cudaSuccess) {
    return cuda_error(err, "running the encoder");
  }
  std::vector<int> ids;
  for (auto& r : made) {
    ids.push_back(s.next_id);
    s.requests.emplace(s.next_id++, std::move(r));
  }
  return ids;
}

Result<void> CudaSeq2Seq::step(const std::vector<int>& ids, const std::vector<std::int32_t>& tokens,
                               std::vector<float>& logits) {
  State& s = *state_;
  const ModelSpec& spec = s.model->spec();
  const auto& e = spec.seq2seq;
  if (ids.size() != tokens.size()) {
    return bad_input("a decoder step got " + std::to_string(ids.size()) + " requests but " +
                     std::to_string(tokens.size()) + " tokens");
  }
  const int R = static_cast<int>(ids.size());
  logits.clear();
  if (R == 0) return {};
  std::set<int> seen;
  int longest_self = 0, longest_cross = 0, last_position = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    auto it = s.requests.find(ids[i]);
    if (it == s.requests.end()) {
      return Error(ErrorCode::kNotFound, "no live request with id " + std::to_string(ids[i]));
    }
    if (!seen.insert(ids[i]).second) {
      return bad_input("request " + std::to_string(ids[i]) + " appears twice in one step");
    }
    const State::Request& r = it->second;
    if (r.position >= r.max_tokens) {
      return bad_input("request " + std::to_string(ids[i]) + " has used its " +
                       std::to_string(r.max_tokens) + " decoder positions");
    }
    if (tokens[i] < 0 || tokens[i] >= spec.vocab_size) {
      return bad_input("request " + std::to_string(ids[i]) + ": token id " +
                       std::to_string(tokens[i]) + " is outside the vocabulary [0, " +
                       std::to_string(spec.vocab_size) + ")");
    }
    longest_self = std::max(longest_self, r.position + 1);
    longest_cross = std::max(longest_cross, r.source_length);
    last_position = std::max(last_position, r.position);
  }
  if (auto err = cudaSetDevice(s.options.device); err != cudaSuccess) {
    return cuda_error(err, "selecting device " + std::to_string(s.options.device));
  }
  const int L = spec.num_layers;
  const int QD = spec.num_heads * spec.head_dim;
  const int V = spec.vocab_size;
  const std::size_t cache_row = static_cast<std::size_t>(2) * L * QD;
  if (auto r = s.reserve_step(R); !r) return r.error();
  if (auto r = s.ensure_positions(e.position_padding_idx + 2 + last_position); !r) {
    return r.error();
  }
  const std::size_t logit_bytes = static_cast<std::size_t>(R) * V * sizeof(float);
  if (auto err = s.logits_d.reserve(logit_bytes); err != cudaSuccess) {
    return cuda_error(err, "allocating logits for " + std::to_string(R) + " rows");
  }

  std::vector<std::int32_t> table_rows;
  std::vector<cuda::Seq2SeqAttentionRow> self_rows, cross_rows;
  std::vector<void*> dst;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const State::Request& r = s.requests.at(ids[i]);
    table_rows.push_back(seq2seq_position_row(spec, tokens[i], r.position));
    self_rows.push_back({r.self.get(), r.position + 1, r.position});
    cross_rows.push_back({r.cross.get(), r.source_length, 0});
    dst.push_back(r.self.as<std::byte>() +
                  static_cast<std::size_t>(r.position) * cache_row * cuda::kHalfBytes);
  }
  const Result<void> uploads[] = {upload_step_data(tokens, s.tokens_d, s.stream),
                                  upload_step_data(table_rows, s.table_rows_d, s.stream),
                                  upload_step_data(self_rows, s.rows_d, s.stream),
                                  upload_step_data(cross_rows, s.cross_rows_d, s.stream),
                                  upload_step_data(dst, s.dst_d, s.stream)};
  for (const auto& r : uploads) {
    if (!r) return r.error();
  }

  cudaStream_t stream = s.stream;
  bool ok = seq2seq_decoder_pass(s, R, longest_self, longest_cross, 0);
  ok &= seq2seq_lm_head_pass(s, s.h.get(), R);
  if (!ok) return Error(ErrorCode::kInternal, "cuBLAS: a matrix product failed in the decoder");
  if (auto err = cudaGetLastError(); err != cudaSuccess) {
    return cuda_error(err, "launching the decoder's kernels");
  }
  logits.resize(static_cast<std::size_t>(R) * V);
  if (auto err = cudaMemcpyAsync(logits.data(), s.logits_d.get(), logit_bytes,
                                 cudaMemcpyDeviceToHost, stream);
      err != cudaSuccess) {
    return cuda_error(err, "copying logits back");
  }
  if (auto err = cudaStreamSynchronize(stream); err != cudaSuccess) {
    return cuda_error(err, "running the decoder");
  }
  for (const int id : ids)
    ++s.requests.at(id).position;
  return {};
}

void CudaSeq2Seq::finish(int id) {
  State& s = *state_;
  auto it = s.requests.find(id);
  if (it == s.requests.end()) return;
  cudaSetDevice(s.options.device);
  // Kernels of the last call have finished (every call ends in a synchronize); cudaFree
  // synchronizes anyway.
  s.requests.erase(it);
}

int CudaSeq2Seq::decoded(int id) const {
  auto it = state_->requests.find(id);
  return it == state_->requests.end() ? -1 : it->second.position;
}

}  // namespace weft::model
