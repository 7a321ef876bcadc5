// CudaEncoder: weight upload and the encoder forward pass on one GPU (cuda_encoder.hpp).

#include "runtime/model/cuda/cuda_encoder.hpp"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>

#include "kernels/cuda/activation.hpp"
#include "kernels/cuda/convert.hpp"
#include "kernels/cuda/embedding.hpp"
#include "kernels/cuda/encoder.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/learned_positions.hpp"
#include "runtime/model/cuda/cuda_common.hpp"
#include "runtime/model/cuda/device_buffer.hpp"
#include "runtime/model/cuda/weight_upload.hpp"

namespace weft::model {

using cuda_detail::cuda_error;
using cuda_detail::DeviceBuffer;
using cuda_detail::kernel_activation;
using cuda_detail::select_device;

namespace {}  // namespace

struct CudaEncoder::State {
  const EncoderModel* model = nullptr;
  CudaEncoderOptions options;
  cudaStream_t stream = nullptr;
  std::unique_ptr<cuda::Blas> blas;
  std::size_t weight_bytes = 0;

  struct Layer {
    DeviceBuffer qkv, qkv_bias, o, o_bias, up, up_bias, down, down_bias;
    DeviceBuffer attn_norm, attn_norm_bias, mlp_norm, mlp_norm_bias;
  };
  DeviceBuffer word, position, type, embedding_norm, embedding_norm_bias;
  std::vector<Layer> layers;
  DeviceBuffer staging;  // raw weight bytes on their way to `precision`

  int capacity_tokens = 0;
  DeviceBuffer x, h, qkv_out, attn, delta, mlp, act, meta;

  ~State() {
    if (stream != nullptr) {
      cudaSetDevice(options.device);
      cudaStreamSynchronize(stream);
      cudaStreamDestroy(stream);
    }
  }

  // The uploads of weight_upload.hpp, through `stream` and `staging`.
  cuda_detail::WeightUpload uploads() {
    return {stream, options.precision, &staging, &weight_bytes};
  }
  Result<void> upload_floats(const std::vector<float>& v, DeviceBuffer& dst) {
    return cuda_detail::upload_floats(stream, weight_bytes, v, dst);
  }
  Result<void> upload_matrix(const cpu::WeightMatrix& w, DeviceBuffer& dst, std::size_t row_offset,
                             std::size_t total_rows) {
    return cuda_detail::upload_matrix(uploads(), w, dst, row_offset, total_rows);
  }

  Result<void> upload_table(const TensorView& t, DeviceBuffer& dst) {
    if (t.data == nullptr) return {};
    const auto count = static_cast<std::size_t>(t.numel());
    return cuda_detail::upload16(uploads(), t.data, t.dtype, count, dst, 0, count);
  }

  Result<void> reserve_step(int tokens) {
    if (tokens <= capacity_tokens) return {};
    const auto& spec = model->spec();
    const auto T = static_cast<std::size_t>(tokens);
    const auto H = static_cast<std::size_t>(spec.hidden_size);
    const auto I = static_cast<std::size_t>(spec.intermediate_size);
    const std::size_t half = cuda::kHalfBytes;
    // Metadata: tokens, types, positions (3T words) and at most T tiles of 4 words.
    auto r = cuda_detail::reserve_step_buffers({{&x, T * H * 4},
                                                {&h, T * H * half},
                                                {&qkv_out, T * 3 * H * 4},
                                                {&attn, T * H * half},
                                                {&delta, T * H * 4},
                                                {&mlp, T * I * 4},
                                                {&act, T * I * half},
                                                {&meta, T * 7 * 4 + 16}},
                                               tokens);
    if (r) capacity_tokens = tokens;
    return r;
  }
};

CudaEncoder::CudaEncoder(std::unique_ptr<State> state) : state_(std::move(state)) {}
CudaEncoder::~CudaEncoder() = default;

std::size_t CudaEncoder::weight_bytes() const noexcept {
  return state_->weight_bytes;
}

std::string CudaEncoder::describe() const {
  return cuda_detail::describe_backend(state_->options.device, state_->options.precision);
}

Result<std::unique_ptr<CudaEncoder>> CudaEncoder::create(const EncoderModel& model,
                                                         const CudaEncoderOptions& options) {
  const ModelSpec& spec = model.spec();
  if (spec.head_dim > cuda::kEncoderMaxHeadDim) {
    return Error(ErrorCode::kUnsupported, spec.architecture + ": head_dim " +
                                              std::to_string(spec.head_dim) +
                                              " is above the CUDA encoder attention's " +
                                              std::to_string(cuda::kEncoderMaxHeadDim));
  }
  if (auto selected = select_device(options.device); !selected) return selected.error();
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
  const auto H = static_cast<std::size_t>(spec.hidden_size);
  const Result<void> tables[] = {
      s->upload_table(model.word_embedding(), s->word),
      s->upload_table(model.position_embedding(), s->position),
      s->upload_table(model.type_embedding(), s->type),
      s->upload_floats(model.embedding_norm(), s->embedding_norm),
      s->upload_floats(model.embedding_norm_bias(), s->embedding_norm_bias)};
  for (const auto& r : tables) {
    if (!r) return r.error();
  }
  s->layers.resize(model.layers().size());
  for (std::size_t i = 0; i < model.layers().size(); ++i) {
    const EncoderModel::Layer& L = model.layers()[i];
    State::Layer& D = s->layers[i];
    std::vector<float> qkv_bias;
    if (!L.q_bias.empty() || !L.k_bias.empty() || !L.v_bias.empty()) {
      qkv_bias.assign(3 * H, 0.0f);
      const std::vector<float>* parts[] = {&L.q_bias, &L.k_bias, &L.v_bias};
      for (std::size_t p = 0; p < 3; ++p) {
        if (!parts[p]->empty()) std::memcpy(&qkv_bias[p * H], parts[p]->data(), H * sizeof(float));
      }
    }
    const Result<void> steps[] = {
        s->upload_matrix(L.q, D.qkv, 0, 3 * H),
        s->upload_matrix(L.k, D.qkv, H, 3 * H),
        s->upload_matrix(L.v, D.qkv, 2 * H, 3 * H),
        s->upload_floats(qkv_bias, D.qkv_bias),
        s->upload_matrix(L.o, D.o, 0, L.o.rows),
        s->upload_floats(L.o_bias, D.o_bias),
        s->upload_floats(L.attn_norm, D.attn_norm),
        s->upload_floats(L.attn_norm_bias, D.attn_norm_bias),
        s->upload_matrix(L.up, D.up, 0, L.up.rows),
        s->upload_floats(L.up_bias, D.up_bias),
        s->upload_matrix(L.down, D.down, 0, L.down.rows),
        s->upload_floats(L.down_bias, D.down_bias),
        s->upload_floats(L.mlp_norm, D.mlp_norm),
        s->upload_floats(L.mlp_norm_bias, D.mlp_norm_bias),
    };
    for (const auto& r : steps) {
      if (!r) return r.error();
    }
  }
  s->staging.reset();
  if (auto r = s->reserve_step(std::max(1, options.max_tokens_per_step)); !r) return r.error();
  return std::unique_ptr<CudaEncoder>(new CudaEncoder(std::move(s)));
}

Result<void> CudaEncoder::encode(const EncodeBatch& batch, std::vector<float>& hidden) {
  State& s = *state_;
  const EncoderModel& model = *s.model;
  if (auto ok = model.check(batch); !ok) return ok;
  const ModelSpec& spec = model.spec();
  const int T = static_cast<int>(batch.tokens.size());
  if (T == 0) {  // nothing to run (a kernel grid of zero blocks would be a launch error)
    hidden.clear();
    return {};
  }
  const int H = spec.hidden_size, I = spec.intermediate_size;
  const int NH = spec.num_heads, HD = spec.head_dim;
  const auto eps = static_cast<float>(spec.norm_epsilon);
  const cuda::Precision P = s.options.precision;
  if (auto err = cudaSetDevice(s.options.device); err != cudaSuccess) {
    return cuda_error(err, "selecting device " + std::to_string(s.options.device));
  }
  if (auto r = s.reserve_step(T); !r) return r;

  // Metadata, one upload: tokens, token types, positions within each sequence, tiles.
  std::vector<std::int32_t> meta(static_cast<std::size_t>(3 * T));
  std::copy(batch.tokens.begin(), batch.tokens.end(), meta.begin());
  if (!batch.token_types.empty()) {
    std::copy(batch.token_types.begin(), batch.token_types.end(), meta.begin() + T);
  }
  std::vector<cuda::EncoderTile> tiles;
  {
    int at = 0;
    for (const int len : batch.lengths) {
      for (int i = 0; i < len; ++i)
        meta[static_cast<std::size_t>(2 * T + at + i)] = i;
      for (int first = 0; first < len; first += cuda::kEncoderTileQueries) {
        tiles.push_back({at + first, std::min(cuda::kEncoderTileQueries, len - first), at, len});
      }
      at += len;
    }
  }
  const std::size_t tile_words = tiles.size() * 4;
  meta.resize(meta.size() + tile_words);
  std::memcpy(meta.data() + 3 * T, tiles.data(), tile_words * sizeof(std::int32_t));
  if (auto err = cudaMemcpyAsync(s.meta.get(), meta.data(), meta.size() * sizeof(std::int32_t),
                                 cudaMemcpyHostToDevice, s.stream);
      err != cudaSuccess) {
    return cuda_error(err, "uploading the batch");
  }
  const auto* d_meta = s.meta.as<std::int32_t>();
  const std::int32_t* d_tokens = d_meta;
  const std::int32_t* d_types = d_meta + T;
  const std::int32_t* d_positions = d_meta + 2 * T;
  const auto* d_tiles = reinterpret_cast<const cuda::EncoderTile*>(d_meta + 3 * T);

  float* x = s.x.as<float>();
  void* h = s.h.get();
  float* delta = s.delta.as<float>();
  cudaStream_t stream = s.stream;
  cuda::embedding_gather(s.word.get(), P, d_tokens, T, H, x, stream);
  cuda::scale_add_positions(x, T, H, 1.0f, s.position.get(), P, d_positions,
                            spec.encoder.position_offset, stream);
  if (s.type.get() != nullptr) {
    cuda::scale_add_positions(x, T, H, 1.0f, s.type.get(), P, d_types, 0, stream);
  }
  if (s.embedding_norm.get() != nullptr) {
    cuda::encoder_post_norm(x, nullptr, nullptr, T, H, s.embedding_norm.as<float>(),
                            s.embedding_norm_bias.as<float>(), eps, h, P, stream);
  } else {
    cuda::convert_to_precision(x, cuda::SourceType::kF32, h, P,
                               static_cast<std::size_t>(T) * static_cast<std::size_t>(H), stream);
  }

  const auto act = kernel_activation(spec.activation);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  bool products_ok = true;
  for (std::size_t i = 0; i < s.layers.size(); ++i) {
    const State::Layer& L = s.layers[i];
    const bool last = i + 1 == s.layers.size();
    products_ok &=
        s.blas->linear(h, T, L.qkv.get(), 3 * H, H, s.qkv_out.as<float>(), 3 * H, P, stream);
    cuda::EncoderAttentionArgs args;
    args.qkv = s.qkv_out.as<float>();
    args.qkv_stride = 3 * H;
    args.qkv_bias = L.qkv_bias.as<float>();
    args.num_heads = NH;
    args.head_dim = HD;
    args.scale = scale;
    args.out = s.attn.get();
    args.precision = P;
    cuda::encoder_attention(args, d_tiles, static_cast<int>(tiles.size()), stream);
    products_ok &= s.blas->linear(s.attn.get(), T, L.o.get(), H, H, delta, H, P, stream);
    cuda::encoder_post_norm(x, delta, L.o_bias.as<float>(), T, H, L.attn_norm.as<float>(),
                            L.attn_norm_bias.as<float>(), eps, h, P, stream);
    products_ok &= s.blas->linear(h, T, L.up.get(), I, H, s.mlp.as<float>(), I, P, stream);
    cuda::mlp_activation(act, /*gated=*/false, s.mlp.as<float>(), L.up_bias.as<float>(), T, I,
                         s.act.get(), P, stream);
    products_ok &= s.blas->linear(s.act.get(), T, L.down.get(), H, I, delta, H, P, stream);
    cuda::encoder_post_norm(x, delta, L.down_bias.as<float>(), T, H, L.mlp_norm.as<float>(),
                            L.mlp_norm_bias.as<float>(), eps, last ? nullptr : h, P, stream);
  }
  if (!products_ok) return Error(ErrorCode::kInternal, "cuBLAS: a matrix product failed");
  if (auto err = cudaGetLastError(); err != cudaSuccess) {
    return cuda_error(err, "launching the encoder's kernels");
  }
  hidden.resize(static_cast<std::size_t>(T) * static_cast<std::size_t>(H));
  if (auto err = cudaMemcpyAsync(hidden.data(), x, hidden.size() * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream);
      err != cudaSuccess) {
    return cuda_error(err, "copying the hidden states back");
  }
  if (auto err = cudaStreamSynchronize(stream); err != cudaSuccess) {
    return cuda_error(err, "running the encoder");
  }
  return {};
}

}  // namespace weft::model
