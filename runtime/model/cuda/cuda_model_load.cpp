// CudaModel: creation, weight upload (pinned, chunked, with progress) and the KV pool.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>

#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/quant_gemv.hpp"
#include "runtime/model/cuda/cuda_model_state.hpp"
#include "runtime/model/cuda/weight_upload.hpp"

namespace weft::model {

Result<void> CudaModel::State::upload_floats(const std::vector<float>& v, DeviceBuffer& dst) {
  return cuda_detail::upload_floats(stream, weight_bytes, v, dst);
}

Result<void> CudaModel::State::upload_quantized(const cpu::WeightMatrix& w, DeviceBuffer& dst,
                                                std::size_t row_offset, std::size_t total_rows) {
  if (!quant_format || !w.quantized() || w.data == nullptr) return {};
  const cuda::QuantMatrixLayout whole =
      cuda::quant_matrix_layout(*quant_format, total_rows, w.cols);
  if (dst.get() == nullptr) {
    if (auto err = dst.reserve(whole.total_bytes()); err != cudaSuccess) {
      return cuda_error(err, "allocating a quantized weight matrix of " +
                                 std::to_string(whole.total_bytes()) + " bytes");
    }
    weight_bytes += whole.total_bytes();
  }
  // The rows' image in the GPU layout, then its codes and headers to their places in dst.
  const cuda::QuantMatrixLayout part = cuda::quant_matrix_layout(*quant_format, w.rows, w.cols);
  std::vector<std::uint32_t> image(part.total_bytes() / 4);
  cuda::quant_repack_rows(part, static_cast<const std::uint8_t*>(w.data), 0, w.rows, image.data(),
                          image.data() + part.header_offset() / 4);
  auto* base = dst.as<std::byte>();
  const auto* host = reinterpret_cast<const std::byte*>(image.data());
  // Through `stream`, waited for: the image is freed on return, and a plain cudaMemcpy from
  // pageable memory may return before its DMA lands (upload_floats).
  if (auto err = cudaMemcpyAsync(base + row_offset * whole.row_code_words * 4, host,
                                 part.code_bytes(), cudaMemcpyHostToDevice, stream);
      err != cudaSuccess) {
    return cuda_error(err, "uploading a quantized weight matrix");
  }
  if (auto err = cudaMemcpyAsync(base + whole.header_offset() + row_offset * whole.row_blocks * 4,
                                 host + part.header_offset(), part.header_bytes(),
                                 cudaMemcpyHostToDevice, stream);
      err != cudaSuccess) {
    return cuda_error(err, "uploading a quantized weight matrix");
  }
  if (auto err = cudaStreamSynchronize(stream); err != cudaSuccess) {
    return cuda_error(err, "uploading a quantized weight matrix");
  }
  uploaded += w.rows * w.row_bytes();
  if (options.on_upload_progress) options.on_upload_progress(uploaded, upload_total);
  return {};
}

// Copies w's rows into rows [row_offset, row_offset + w.rows) of a [total_rows, w.cols]
// device matrix in the model's precision (fusing q/k/v and gate/up into one product each).
Result<void> CudaModel::State::upload_matrix(const cpu::WeightMatrix& w, DeviceBuffer& dst,
                                             std::size_t row_offset, std::size_t total_rows,
                                             DeviceBuffer& staging) {
  if (w.quantized() && quant_format) return {};  // upload_quantized's
  if (w.quantized()) {
    // No GPU layout for this model: a 16-bit copy of the dequantized matrix.
    std::vector<float> widened(w.rows * w.cols);
    for (std::size_t r = 0; r < w.rows; ++r)
      cpu::weight_row_to_f32(w, r, widened.data() + r * w.cols);
    const cpu::WeightMatrix f32{DType::kF32, widened.data(), w.rows, w.cols};
    const std::size_t before = uploaded;
    if (auto r = upload_matrix(f32, dst, row_offset, total_rows, staging); !r) return r;
    uploaded = before + w.rows * w.row_bytes();
    if (options.on_upload_progress) options.on_upload_progress(uploaded, upload_total);
    return {};
  }
  const std::size_t total = total_rows * w.cols * cuda::kHalfBytes;
  if (dst.get() == nullptr) {
    if (auto err = dst.reserve(total); err != cudaSuccess) {
      return cuda_error(err, "allocating a weight matrix of " + std::to_string(total) + " bytes");
    }
    weight_bytes += total;
  }
  const std::size_t raw = w.rows * w.cols * dtype_size(w.dtype);
  if (auto err = staging.reserve(raw); err != cudaSuccess) {
    return cuda_error(err, "allocating the upload staging buffer");
  }
  for (int b = 0; b < 2; ++b) {
    if (auto err = upload_chunks[b].reserve(kUploadChunk); err != cudaSuccess) {
      return cuda_error(err, "allocating pinned upload buffers");
    }
    if (upload_done[b] == nullptr) {
      if (auto err = cudaEventCreateWithFlags(&upload_done[b], cudaEventDisableTiming);
          err != cudaSuccess) {
        return cuda_error(err, "creating upload events");
      }
    }
  }
  const auto* source = static_cast<const std::byte*>(w.data);
  for (std::size_t offset = 0, k = 0; offset < raw; offset += kUploadChunk, ++k) {
    const std::size_t n = std::min(kUploadChunk, raw - offset);
    PinnedBuffer& chunk = upload_chunks[k % 2];
    // The copy that last used this chunk must have left it.
    if (auto err = cudaEventSynchronize(upload_done[k % 2]); err != cudaSuccess) {
      return cuda_error(err, "uploading a weight matrix");
    }
    std::memcpy(chunk.get(), source + offset, n);
    if (auto err = cudaMemcpyAsync(staging.as<std::byte>() + offset, chunk.get(), n,
                                   cudaMemcpyHostToDevice, stream);
        err != cudaSuccess) {
      return cuda_error(err, "uploading a weight matrix");
    }
    if (auto err = cudaEventRecord(upload_done[k % 2], stream); err != cudaSuccess) {
      return cuda_error(err, "uploading a weight matrix");
    }
  }
  void* at = dst.as<std::byte>() + row_offset * w.cols * cuda::kHalfBytes;
  cuda::convert_to_precision(staging.get(), source_type(w.dtype), at, options.precision,
                             w.rows * w.cols, stream);
  if (auto err = cudaStreamSynchronize(stream); err != cudaSuccess) {
    return cuda_error(err, "converting a weight matrix");
  }
  uploaded += raw;
  if (options.on_upload_progress) options.on_upload_progress(uploaded, upload_total);
  return {};
}

Result<void> CudaModel::State::reserve_step(int tokens) {
  if (tokens <= capacity_tokens) return {};
  drop_graphs();
  const auto T = static_cast<std::size_t>(tokens);
  const auto H = static_cast<std::size_t>(spec.hidden_size);
  const auto I = static_cast<std::size_t>(spec.intermediate_size);
  const auto QD = static_cast<std::size_t>(spec.q_dim()),
             KVD = static_cast<std::size_t>(spec.kv_dim());
  const std::size_t mlp_width = spec.gated_mlp ? 2 * I : I;
  const std::size_t half = cuda::kHalfBytes;
  struct Want {
    DeviceBuffer* buffer;
    std::size_t bytes;
  };
  const Want wants[] = {
      {&x, T * H * 4},
      {&h, T * H * half},
      {&qkv_out, T * (QD + 2 * KVD) * 4},
      {&attn, T * QD * half},
      {&delta, T * H * 4},
      {&mlp, T * mlp_width * 4},
      {&act, T * I * half},
      {&h_mlp, spec.parallel_attention ? T * H * half : 0},
      {&norm_squares,
       2 * static_cast<std::size_t>(cuda::quant_norm_squares(static_cast<int>(H))) * 4}};
  for (const auto& w : wants) {
    if (auto err = w.buffer->reserve(w.bytes); err != cudaSuccess) {
      return cuda_error(err, "allocating step buffers for " + std::to_string(tokens) + " tokens");
    }
  }
  capacity_tokens = tokens;
  return {};
}

Result<CudaModel> CudaModel::create(const Model& model, const CudaModelOptions& options) {
  const ModelSpec& spec = model.spec();
  if (spec.head_dim > 256 || spec.head_dim % 2 != 0) {
    return Error(ErrorCode::kUnsupported,
                 spec.architecture +
                     ": the CUDA attention kernels take an even head_dim up to "
                     "256, this model has " +
                     std::to_string(spec.head_dim));
  }
  if (options.page_size <= 0) {
    return Error(ErrorCode::kInvalidArgument, "CUDA model: page_size must be positive");
  }
  if (const int k = options.decode_segment_keys;
      k != -1 && k != 0 && !cuda::decode_segment_keys_valid(k)) {
    return Error(ErrorCode::kInvalidArgument,
                 "CUDA model: decode_segment_keys " + std::to_string(k) +
                     " is not -1, 0 or a multiple of 64 from 64 to 4096");
  }
  int count = 0;
  if (auto err = cudaGetDeviceCount(&count);
      err != cudaSuccess || options.device >= count || options.device < 0) {
    cudaGetLastError();
    return Error(ErrorCode::kNotFound,
                 "CUDA device " + std::to_string(options.device) + " is not available (" +
                     (err != cudaSuccess ? cudaGetErrorString(err)
                                         : std::to_string(count) + " devices visible") +
                     ")");
  }
  LayerRange held = options.layers;
  if (held.count < 0) held = {model.first_layer(), model.layer_count()};
  if (held.count < 1 || held.begin < model.first_layer() ||
      held.begin + held.count > model.first_layer() + model.layer_count()) {
    return Error(ErrorCode::kInvalidArgument,
                 "CUDA model: layers [" + std::to_string(held.begin) + ", " +
                     std::to_string(held.begin + held.count) + ") are not among the model's [" +
                     std::to_string(model.first_layer()) + ", " +
                     std::to_string(model.first_layer() + model.layer_count()) + ")");
  }
  auto s = std::make_unique<State>();
  s->spec = spec;
  s->options = options;
  s->first_layer = held.begin;
  s->embeds = held.begin == 0;
  s->ends = held.begin + held.count == spec.num_layers;
  s->layout = model.kv_layout(options.page_size);
  s->layout.num_layers = held.count;
  if (options.kv_dtype == KvDtype::kF32) {
    return Error(ErrorCode::kUnsupported,
                 "CUDA model: kv cache dtype f32 is not supported (bf16, int8 or fp8)");
  }
  // 16-bit pages hold the model's own precision; the quantized ones their bytes and scales.
  s->layout.dtype = kv_dtype_scaled(options.kv_dtype)             ? options.kv_dtype
                    : options.precision == cuda::Precision::kBF16 ? KvDtype::kBF16
                                                                  : KvDtype::kF16;
  if (auto err = cudaSetDevice(options.device); err != cudaSuccess) {
    return cuda_error(err, "selecting device " + std::to_string(options.device));
  }
  if (auto err = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking); err != cudaSuccess) {
    return cuda_error(err, "creating a stream");
  }
  if (cudaStreamCreateWithFlags(&s->side_stream, cudaStreamNonBlocking) != cudaSuccess ||
      cudaEventCreateWithFlags(&s->fork_event, cudaEventDisableTiming) != cudaSuccess ||
      cudaEventCreateWithFlags(&s->join_event, cudaEventDisableTiming) != cudaSuccess) {
    return cuda_error(cudaGetLastError(), "creating the prefetch stream");
  }
  if (cudaStreamCreateWithFlags(&s->upload_stream, cudaStreamNonBlocking) != cudaSuccess ||
      cudaEventCreateWithFlags(&s->upload_event, cudaEventDisableTiming) != cudaSuccess) {
    return cuda_error(cudaGetLastError(), "creating the sampler's upload stream");
  }
  s->blas = std::make_unique<cuda::Blas>();
  if (!s->blas->error().empty()) return Error(ErrorCode::kInternal, s->blas->error());
  s->blas->set_gemv_max_tokens(std::max(0, options.small_step_kernel_tokens));
  s->decode_segment_keys = std::max(0, options.decode_segment_keys);

  // Weights: fused qkv and gate_up products, 16-bit matrices, fp32 norms and biases.
  DeviceBuffer staging;
  {
    auto bytes = [](const cpu::WeightMatrix& w) {
      return w.data == nullptr ? std::size_t{0} : w.rows * w.row_bytes();
    };
    const TensorView& e = model.embedding();
    const bool tied = model.lm_head().data == e.data;
    if (s->embeds || (tied && s->ends)) {
      s->upload_total +=
          static_cast<std::size_t>(spec.vocab_size) * spec.hidden_size * dtype_size(e.dtype);
    }
    if (!tied && s->ends) s->upload_total += bytes(model.lm_head());
    for (int l = held.begin; l < held.begin + held.count; ++l) {
      const Model::Layer& L = model.layers()[static_cast<std::size_t>(l)];
      for (const cpu::WeightMatrix* w :
           {&L.q, &L.k, &L.v, &L.qkv, &L.o, &L.gate_up, &L.gate, &L.up, &L.down}) {
        s->upload_total += bytes(*w);
      }
    }
  }
  const auto H = static_cast<std::size_t>(spec.hidden_size);
  const auto I = static_cast<std::size_t>(spec.intermediate_size);
  const auto QD = static_cast<std::size_t>(spec.q_dim()),
             KVD = static_cast<std::size_t>(spec.kv_dim());
  // Quantized weights stay quantized on the GPU when every matrix's in_features (H for qkv,
  // gate/up and the lm head, QD for o, I for down) has a GPU layout.
  if (const quant::QuantType q = model.weight_quantization();
      q != quant::QuantType::kNone && cuda::quant_layout_supported(H) &&
      cuda::quant_layout_supported(QD) && cuda::quant_layout_supported(I)) {
    s->quant_format = static_cast<cuda::QuantGemvFormat>(static_cast<int>(q) - 1);
  }
  {
    const TensorView& e = model.embedding();
    const cpu::WeightMatrix table{e.dtype, e.data, static_cast<std::size_t>(spec.vocab_size), H};
    const cpu::WeightMatrix& head = model.lm_head();
    const bool tied = head.data == e.data;
    // A pipeline stage holds the table only where it embeds, or where it is the tied head.
    if (s->embeds || (tied && s->ends)) {
      if (auto r = s->upload_matrix(table, s->embedding, 0, table.rows, staging); !r)
        return r.error();
    }
    if (!tied && s->ends) {
      if (auto r = s->upload_matrix(head, s->lm_head, 0, head.rows, staging); !r) return r.error();
      if (auto r = s->upload_quantized(head, s->lm_head_q, 0, head.rows); !r) return r.error();
    }
  }
  if (const TensorView& p = model.position_table(); p.data != nullptr && s->embeds) {
    const cpu::WeightMatrix table{p.dtype, p.data, static_cast<std::size_t>(p.shape[0]), H};
    s->upload_total += table.rows * H * dtype_size(p.dtype);
    if (auto r = s->upload_matrix(table, s->position_table, 0, table.rows, staging); !r) {
      return r.error();
    }
  }
  if (s->embeds) {
    for (auto [v, dst] : {std::pair{&model.embedding_norm(), &s->embedding_norm},
                          std::pair{&model.embedding_norm_bias(), &s->embedding_norm_bias}}) {
      if (auto r = s->upload_floats(*v, *dst); !r) return r.error();
    }
  }
  if (auto r = s->upload_floats(model.alibi_slopes(), s->alibi_slopes); !r) return r.error();
  if (s->ends) {
    if (auto r = s->upload_floats(model.final_norm(), s->final_norm); !r) return r.error();
    if (auto r = s->upload_floats(model.final_norm_bias(), s->final_norm_bias); !r) {
      return r.error();
    }
  }
  s->layers.resize(static_cast<std::size_t>(held.count));
  auto concat = [](std::initializer_list<const std::vector<float>*> parts) {
    std::vector<float> out;
    for (const auto* p : parts)
      out.insert(out.end(), p->begin(), p->end());
    return out;
  };
  for (std::size_t l = 0; l < s->layers.size(); ++l) {
    const Model::Layer& L = model.layers()[static_cast<std::size_t>(held.begin) + l];
    State::Layer& D = s->layers[l];
    std::vector<Result<void>> steps;
    steps.push_back(s->upload_floats(L.attn_norm, D.attn_norm));
    steps.push_back(s->upload_floats(L.attn_norm_bias, D.attn_norm_bias));
    steps.push_back(s->upload_floats(L.mlp_norm, D.mlp_norm));
    steps.push_back(s->upload_floats(L.mlp_norm_bias, D.mlp_norm_bias));
    const std::size_t qkv_rows = QD + 2 * KVD;
    if (spec.qkv_layout == QkvLayout::kSeparate) {
      steps.push_back(s->upload_matrix(L.q, D.qkv, 0, qkv_rows, staging));
      steps.push_back(s->upload_quantized(L.q, D.qkv_q, 0, qkv_rows));
      steps.push_back(s->upload_matrix(L.k, D.qkv, QD, qkv_rows, staging));
      steps.push_back(s->upload_quantized(L.k, D.qkv_q, QD, qkv_rows));
      steps.push_back(s->upload_matrix(L.v, D.qkv, QD + KVD, qkv_rows, staging));
      steps.push_back(s->upload_quantized(L.v, D.qkv_q, QD + KVD, qkv_rows));
      steps.push_back(s->upload_floats(concat({&L.q_bias, &L.k_bias, &L.v_bias}), D.qkv_bias));
    } else {
      steps.push_back(s->upload_matrix(L.qkv, D.qkv, 0, qkv_rows, staging));
      steps.push_back(s->upload_quantized(L.qkv, D.qkv_q, 0, qkv_rows));
      steps.push_back(s->upload_floats(L.qkv_bias, D.qkv_bias));
    }
    steps.push_back(s->upload_matrix(L.o, D.o, 0, H, staging));
    steps.push_back(s->upload_quantized(L.o, D.o_q, 0, H));
    steps.push_back(s->upload_floats(L.o_bias, D.o_bias));
    if (spec.gated_mlp && L.gate_up.data != nullptr) {
      steps.push_back(s->upload_matrix(L.gate_up, D.up, 0, 2 * I, staging));
      steps.push_back(s->upload_quantized(L.gate_up, D.up_q, 0, 2 * I));
      steps.push_back(s->upload_floats(L.gate_up_bias, D.up_bias));
    } else if (spec.gated_mlp) {
      steps.push_back(s->upload_matrix(L.gate, D.up, 0, 2 * I, staging));
      steps.push_back(s->upload_matrix(L.up, D.up, I, 2 * I, staging));
      steps.push_back(s->upload_quantized(L.gate, D.up_q, 0, 2 * I));
      steps.push_back(s->upload_quantized(L.up, D.up_q, I, 2 * I));
      steps.push_back(s->upload_floats(concat({&L.gate_bias, &L.up_bias}), D.up_bias));
    } else {
      steps.push_back(s->upload_matrix(L.up, D.up, 0, I, staging));
      steps.push_back(s->upload_quantized(L.up, D.up_q, 0, I));
      steps.push_back(s->upload_floats(L.up_bias, D.up_bias));
    }
    steps.push_back(s->upload_matrix(L.down, D.down, 0, H, staging));
    steps.push_back(s->upload_quantized(L.down, D.down_q, 0, H));
    steps.push_back(s->upload_floats(L.down_bias, D.down_bias));
    for (auto& step : steps) {
      if (!step) return step.error();
    }
  }
  staging.reset();
  if (s->quant_format) {
    // Larger steps' products dequantize one matrix at a time into this buffer.
    const std::size_t mlp_rows = spec.gated_mlp ? 2 * I : I;
    const std::size_t largest = std::max({(QD + 2 * KVD) * H, H * QD, mlp_rows * H, H * I});
    if (auto err = s->dequant_scratch.reserve(largest * cuda::kHalfBytes); err != cudaSuccess) {
      return cuda_error(err, "allocating the dequantization buffer");
    }
    const int widest = static_cast<int>(std::max({H, QD, I}));
    if (auto err = s->rounded_inputs.reserve(
            cuda::quant_rounded_inputs_bytes(cuda::kQuantGemvMaxTokens, widest));
        err != cudaSuccess) {
      return cuda_error(err, "allocating the rounded inputs' buffer");
    }
  }
  for (int b = 0; b < 2; ++b) {
    s->upload_chunks[b].reset();
    if (s->upload_done[b] != nullptr) cudaEventDestroy(s->upload_done[b]);
    s->upload_done[b] = nullptr;
  }
  // Dynamic NTK and longrope frequencies depend on the sequence's length: computed per step.
  if (spec.position == PositionEmbedding::kRope && spec.rope.scaling != RopeScaling::kDynamic &&
      spec.rope.scaling != RopeScaling::kLongrope) {
    s->fixed_rope = rope_frequencies(spec.rope, spec.rotary_dim(), 0);
  }
  if (auto r = s->reserve_step(std::max(1, options.max_tokens_per_step)); !r) return r.error();

  // The KV pool, last, from what is left.
  const std::size_t page_bytes = s->layout.bytes_per_page();
  int pages = options.num_pages;
  if (pages <= 0) {
    std::size_t free_bytes = 0, total_bytes = 0;
    if (auto err = cudaMemGetInfo(&free_bytes, &total_bytes); err != cudaSuccess) {
      return cuda_error(err, "reading free device memory");
    }
    // What the fraction allows minus what is in use already (this process's weights and
    // buffers, the CUDA context, anything else on the device).
    const double budget = static_cast<double>(total_bytes) * options.gpu_memory_fraction -
                          static_cast<double>(total_bytes - free_bytes);
    pages = static_cast<int>(std::min<double>(budget / static_cast<double>(page_bytes), 1 << 30));
    if (pages <= 0) {
      return Error(ErrorCode::kResourceExhausted,
                   "CUDA model: gpu_memory_fraction " +
                       std::to_string(options.gpu_memory_fraction) + " of " +
                       std::to_string(total_bytes >> 20) +
                       " MiB leaves no room for KV pages after the weights and buffers (" +
                       std::to_string((total_bytes - free_bytes) >> 20) + " MiB in use)");
    }
  }
  if (auto err = s->kv.reserve(static_cast<std::size_t>(pages) * page_bytes); err != cudaSuccess) {
    return cuda_error(err, "allocating " + std::to_string(pages) + " KV pages");
  }
  s->num_pages = pages;
  s->free.reserve(static_cast<std::size_t>(pages));
  for (int p = pages - 1; p >= 0; --p)
    s->free.push_back(p);
  return CudaModel(std::move(s));
}

CudaModel::CudaModel(std::unique_ptr<State> state) : state_(std::move(state)) {}
CudaModel::CudaModel(CudaModel&&) noexcept = default;
CudaModel& CudaModel::operator=(CudaModel&&) noexcept = default;
CudaModel::~CudaModel() = default;

const ModelSpec& CudaModel::spec() const noexcept {
  return state_->spec;
}
cuda::Precision CudaModel::precision() const noexcept {
  return state_->options.precision;
}
int CudaModel::device() const noexcept {
  return state_->options.device;
}
std::size_t CudaModel::weight_bytes() const noexcept {
  return state_->weight_bytes;
}
const KvLayout& CudaModel::kv_layout() const noexcept {
  return state_->layout;
}
int CudaModel::num_pages() const noexcept {
  return state_->num_pages;
}
int CudaModel::free_pages() const noexcept {
  return static_cast<int>(state_->free.size());
}
int CudaModel::pages_for(int tokens) const noexcept {
  return (tokens + state_->layout.page_size - 1) / state_->layout.page_size;
}
std::optional<int> CudaModel::allocate_page() {
  if (state_->free.empty()) return std::nullopt;
  const int page = state_->free.back();
  state_->free.pop_back();
  return page;
}
void CudaModel::release_page(int page) {
  state_->free.push_back(page);
}
void CudaModel::set_kernel_profiling(bool on) noexcept {
  state_->profiling = on;
}
std::map<std::string, double> CudaModel::take_kernel_profile() {
  return std::exchange(state_->profile_ms, {});
}

}  // namespace weft::model
