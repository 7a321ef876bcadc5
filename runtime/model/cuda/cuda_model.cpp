// CudaModel: weight upload, the device KV pool, and the forward pass as a sequence of kernel
// launches on one stream (kernels/cuda/*).

#include "runtime/model/cuda/cuda_model.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>
#include <utility>

#include "kernels/cuda/activation.hpp"
#include "kernels/cuda/convert.hpp"
#include "kernels/cuda/embedding.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/norm.hpp"
#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/rope.hpp"
#include "kernels/cuda/sampling.hpp"
#include "runtime/model/cuda/device_buffer.hpp"
#include "runtime/model/rope_frequencies.hpp"

namespace weft::model {

using cuda_detail::DeviceBuffer;
using cuda_detail::PinnedBuffer;

namespace {

Error cuda_error(cudaError_t err, const std::string& what) {
  const ErrorCode code =
      err == cudaErrorMemoryAllocation ? ErrorCode::kResourceExhausted : ErrorCode::kInternal;
  return Error(code, "CUDA: " + what + ": " + cudaGetErrorString(err));
}

cuda::SourceType source_type(DType d) {
  return d == DType::kF32   ? cuda::SourceType::kF32
         : d == DType::kF16 ? cuda::SourceType::kF16
                            : cuda::SourceType::kBF16;
}

cuda::ActivationKind to_kernel(Activation a) {
  switch (a) {
    case Activation::kSilu:
      return cuda::ActivationKind::kSilu;
    case Activation::kGelu:
      return cuda::ActivationKind::kGelu;
    case Activation::kGeluTanh:
      return cuda::ActivationKind::kGeluTanh;
    case Activation::kRelu:
      return cuda::ActivationKind::kRelu;
  }
  return cuda::ActivationKind::kSilu;
}

// Word offsets of the step's metadata in the one buffer uploaded per step.
struct StepLayout {
  std::size_t tokens = 0, positions = 0, token_seq = 0, table_begin = 0, page_ids = 0;
  std::size_t logit_rows = 0, decode_queries = 0, tiles = 0, inv_freq = 0, factor = 0;
  std::size_t words = 0;
};

}  // namespace

struct CudaModel::State {
  ModelSpec spec;
  CudaModelOptions options;
  KvLayout layout;
  int num_pages = 0;
  std::vector<int> free;  // a stack, as KvCache's
  cudaStream_t stream = nullptr;
  std::unique_ptr<cuda::Blas> blas;
  std::size_t weight_bytes = 0;

  struct Layer {
    DeviceBuffer attn_norm, attn_norm_bias, mlp_norm, mlp_norm_bias;
    DeviceBuffer qkv, qkv_bias, o, o_bias, up, up_bias, down, down_bias;  // up: gate_up if gated
  };
  DeviceBuffer embedding, lm_head, final_norm, final_norm_bias;
  std::vector<Layer> layers;
  DeviceBuffer kv;  // the page pool

  // Rope inverse frequencies for every scaling but dynamic NTK (which depends on the length).
  std::optional<RopeFrequencies> fixed_rope;

  // Step buffers.
  int capacity_tokens = 0;
  DeviceBuffer x, h, qkv_out, attn, delta, mlp, act, logits, split_workspace, meta;
  PinnedBuffer meta_host, logits_host;
  // The GPU sampler's buffers: its inputs (rows, edits, bitmasks) and outputs (results,
  // candidates, top entries) each travel in one copy; `work` holds the rows being sampled.
  DeviceBuffer sample_in, sample_out, sample_work;
  PinnedBuffer sample_in_host, sample_out_host;
  int launched_rows = 0;  // logit rows of the step launch() enqueued; -1: none

  // Decode graphs by (tokens, sequences, logit rows, decode splits): what fixes their grids
  // and metadata offsets. They point into the buffers above, so any reallocation drops them.
  using GraphKey = std::tuple<int, int, int, int>;
  static constexpr std::size_t kMaxGraphs = 512;
  std::map<GraphKey, cudaGraphExec_t> graphs;
  bool graphs_broken = false;

  // The logits come back in chunks, each followed by an event: the host copies chunk k out of
  // pinned memory while chunk k + 1 crosses the bus.
  static constexpr std::size_t kLogitChunks = 8;
  static constexpr std::size_t kLogitChunkFloats = std::size_t{1} << 20;
  std::vector<cudaEvent_t> copy_events;

  // Per-kernel-class timing (set_kernel_profiling): an event after each kernel class of a
  // plain (uncaptured) step, and the milliseconds summed by class.
  bool profiling = false;
  std::vector<std::pair<const char*, cudaEvent_t>> marks;
  std::size_t marks_used = 0;
  std::map<std::string, double> profile_ms;
  void drop_graphs() {
    for (auto& [key, exec] : graphs)
      cudaGraphExecDestroy(exec);
    graphs.clear();
  }

  ~State() {
    if (stream != nullptr) {
      cudaSetDevice(options.device);
      cudaStreamSynchronize(stream);
      drop_graphs();
      for (auto e : copy_events)
        cudaEventDestroy(e);
      for (auto& m : marks)
        cudaEventDestroy(m.second);
      cudaStreamDestroy(stream);
    }
  }

  Result<void> reserve_step(int tokens);
  Result<void> upload_matrix(const cpu::WeightMatrix& w, DeviceBuffer& dst, std::size_t row_offset,
                             std::size_t total_rows, DeviceBuffer& staging);
  // Weight uploads go through two pinned chunks: the host copies chunk k + 1 out of the
  // mapped file while chunk k crosses the bus (a pageable source would be staged by the
  // driver in small synchronous pieces).
  static constexpr std::size_t kUploadChunk = std::size_t{32} << 20;
  PinnedBuffer upload_chunks[2];
  cudaEvent_t upload_done[2] = {nullptr, nullptr};
  std::size_t uploaded = 0, upload_total = 0;
  Result<void> upload_floats(const std::vector<float>& v, DeviceBuffer& dst);
  // copy_logits false: enqueue the step and return without waiting (launch()).
  Result<void> run(const StepBatch& batch, std::vector<float>& logits, bool copy_logits = true);
  Result<void> sample(const DeviceSamplingInput& input, DeviceSamplingOutput& output);
};

Result<void> CudaModel::State::upload_floats(const std::vector<float>& v, DeviceBuffer& dst) {
  if (v.empty()) return {};
  if (auto err = dst.reserve(v.size() * sizeof(float)); err != cudaSuccess) {
    return cuda_error(err, "allocating a norm or bias vector");
  }
  weight_bytes += v.size() * sizeof(float);
  // Every upload goes through `stream`: a plain cudaMemcpy from pageable memory may return
  // before its DMA lands, and a non-blocking stream would not wait for it.
  if (auto err = cudaMemcpyAsync(dst.get(), v.data(), v.size() * sizeof(float),
                                 cudaMemcpyHostToDevice, stream);
      err != cudaSuccess) {
    return cuda_error(err, "uploading a norm or bias vector");
  }
  if (auto err = cudaStreamSynchronize(stream); err != cudaSuccess) {
    return cuda_error(err, "uploading a norm or bias vector");
  }
  return {};
}

// Copies w's rows into rows [row_offset, row_offset + w.rows) of a [total_rows, w.cols]
// device matrix in the model's precision (fusing q/k/v and gate/up into one product each).
Result<void> CudaModel::State::upload_matrix(const cpu::WeightMatrix& w, DeviceBuffer& dst,
                                             std::size_t row_offset, std::size_t total_rows,
                                             DeviceBuffer& staging) {
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
      {&x, T * H * 4},        {&h, T * H * half},  {&qkv_out, T * (QD + 2 * KVD) * 4},
      {&attn, T * QD * half}, {&delta, T * H * 4}, {&mlp, T * mlp_width * 4},
      {&act, T * I * half}};
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
  auto s = std::make_unique<State>();
  s->spec = spec;
  s->options = options;
  s->layout = model.kv_layout(options.page_size);
  if (auto err = cudaSetDevice(options.device); err != cudaSuccess) {
    return cuda_error(err, "selecting device " + std::to_string(options.device));
  }
  if (auto err = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking); err != cudaSuccess) {
    return cuda_error(err, "creating a stream");
  }
  s->blas = std::make_unique<cuda::Blas>();
  if (!s->blas->error().empty()) return Error(ErrorCode::kInternal, s->blas->error());
  s->blas->set_gemv_max_tokens(options.small_step_kernel_tokens);

  // Weights: fused qkv and gate_up products, 16-bit matrices, fp32 norms and biases.
  DeviceBuffer staging;
  {
    auto bytes = [](const cpu::WeightMatrix& w) {
      return w.data == nullptr ? std::size_t{0} : w.rows * w.cols * dtype_size(w.dtype);
    };
    const TensorView& e = model.embedding();
    s->upload_total =
        static_cast<std::size_t>(spec.vocab_size) * spec.hidden_size * dtype_size(e.dtype);
    if (model.lm_head().data != e.data) s->upload_total += bytes(model.lm_head());
    for (const Model::Layer& L : model.layers()) {
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
  {
    const TensorView& e = model.embedding();
    const cpu::WeightMatrix table{e.dtype, e.data, static_cast<std::size_t>(spec.vocab_size), H};
    if (auto r = s->upload_matrix(table, s->embedding, 0, table.rows, staging); !r)
      return r.error();
    const cpu::WeightMatrix& head = model.lm_head();
    if (head.data != e.data) {
      if (auto r = s->upload_matrix(head, s->lm_head, 0, head.rows, staging); !r) return r.error();
    }
  }
  if (auto r = s->upload_floats(model.final_norm(), s->final_norm); !r) return r.error();
  if (auto r = s->upload_floats(model.final_norm_bias(), s->final_norm_bias); !r) return r.error();
  s->layers.resize(static_cast<std::size_t>(spec.num_layers));
  auto concat = [](std::initializer_list<const std::vector<float>*> parts) {
    std::vector<float> out;
    for (const auto* p : parts)
      out.insert(out.end(), p->begin(), p->end());
    return out;
  };
  for (std::size_t l = 0; l < s->layers.size(); ++l) {
    const Model::Layer& L = model.layers()[l];
    State::Layer& D = s->layers[l];
    std::vector<Result<void>> steps;
    steps.push_back(s->upload_floats(L.attn_norm, D.attn_norm));
    steps.push_back(s->upload_floats(L.attn_norm_bias, D.attn_norm_bias));
    steps.push_back(s->upload_floats(L.mlp_norm, D.mlp_norm));
    steps.push_back(s->upload_floats(L.mlp_norm_bias, D.mlp_norm_bias));
    const std::size_t qkv_rows = QD + 2 * KVD;
    if (spec.qkv_layout == QkvLayout::kSeparate) {
      steps.push_back(s->upload_matrix(L.q, D.qkv, 0, qkv_rows, staging));
      steps.push_back(s->upload_matrix(L.k, D.qkv, QD, qkv_rows, staging));
      steps.push_back(s->upload_matrix(L.v, D.qkv, QD + KVD, qkv_rows, staging));
      steps.push_back(s->upload_floats(concat({&L.q_bias, &L.k_bias, &L.v_bias}), D.qkv_bias));
    } else {
      steps.push_back(s->upload_matrix(L.qkv, D.qkv, 0, qkv_rows, staging));
      steps.push_back(s->upload_floats(L.qkv_bias, D.qkv_bias));
    }
    steps.push_back(s->upload_matrix(L.o, D.o, 0, H, staging));
    steps.push_back(s->upload_floats(L.o_bias, D.o_bias));
    if (spec.gated_mlp && L.gate_up.data != nullptr) {
      steps.push_back(s->upload_matrix(L.gate_up, D.up, 0, 2 * I, staging));
      steps.push_back(s->upload_floats(L.gate_up_bias, D.up_bias));
    } else if (spec.gated_mlp) {
      steps.push_back(s->upload_matrix(L.gate, D.up, 0, 2 * I, staging));
      steps.push_back(s->upload_matrix(L.up, D.up, I, 2 * I, staging));
      steps.push_back(s->upload_floats(concat({&L.gate_bias, &L.up_bias}), D.up_bias));
    } else {
      steps.push_back(s->upload_matrix(L.up, D.up, 0, I, staging));
      steps.push_back(s->upload_floats(L.up_bias, D.up_bias));
    }
    steps.push_back(s->upload_matrix(L.down, D.down, 0, H, staging));
    steps.push_back(s->upload_floats(L.down_bias, D.down_bias));
    for (auto& step : steps) {
      if (!step) return step.error();
    }
  }
  staging.reset();
  for (int b = 0; b < 2; ++b) {
    s->upload_chunks[b].reset();
    if (s->upload_done[b] != nullptr) cudaEventDestroy(s->upload_done[b]);
    s->upload_done[b] = nullptr;
  }
  if (spec.position == PositionEmbedding::kRope && spec.rope.scaling != RopeScaling::kDynamic) {
    s->fixed_rope = rope_frequencies(spec.rope, spec.rotary_dim(), 0);
  }
  if (auto r = s->reserve_step(std::max(1, options.max_tokens_per_step)); !r) return r.error();

  // The KV pool, last, from what is left.
  const std::size_t page_bytes = s->layout.floats_per_page() * cuda::kHalfBytes;
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

Result<void> CudaModel::forward(const StepBatch& batch, std::vector<float>& logits) {
  if (auto ok = check_step_batch(state_->spec, batch, state_->layout, state_->num_pages); !ok) {
    return ok;
  }
  return state_->run(batch, logits);
}

Result<void> CudaModel::launch(const StepBatch& batch) {
  state_->launched_rows = -1;
  if (auto ok = check_step_batch(state_->spec, batch, state_->layout, state_->num_pages); !ok) {
    return ok;
  }
  std::vector<float> unused;
  if (auto r = state_->run(batch, unused, false); !r) return r;
  state_->launched_rows = batch.logit_rows();
  return {};
}

Result<void> CudaModel::sample(const DeviceSamplingInput& input, DeviceSamplingOutput& output) {
  return state_->sample(input, output);
}

Result<void> CudaModel::State::run(const StepBatch& batch, std::vector<float>& logits_out,
                                   bool copy_logits) {
  const int T = static_cast<int>(batch.tokens.size());
  const int S = static_cast<int>(batch.sequences.size());
  const int V = spec.vocab_size;
  if (T == 0) {
    logits_out.clear();
    return {};
  }
  if (auto err = cudaSetDevice(options.device); err != cudaSuccess) {
    return cuda_error(err, "selecting device " + std::to_string(options.device));
  }
  if (auto r = reserve_step(T); !r) return r;

  // Host side of the step: which sequence each token is in, logit rows, decode queries
  // (single-token sequences) and prefill tiles (runs of up to prefill_tile_queries tokens of
  // longer ones).
  const int R = spec.position == PositionEmbedding::kRope ? spec.rotary_dim() : 0;
  const int half = R / 2;
  std::size_t page_words = 0;
  for (const auto& seq : batch.sequences)
    page_words += seq.page_table.size();
  const int rows = batch.logit_rows();
  StepLayout L;
  {
    std::size_t at = 0;
    auto take = [&](std::size_t words) {
      const std::size_t start = at;
      at += words;
      return start;
    };
    // Page tables last: every other offset depends only on the batch's shape, so a captured
    // decode graph stays valid as the page tables grow.
    L.tokens = take(T);
    L.positions = take(T);
    L.token_seq = take(T);
    L.table_begin = take(S);
    L.logit_rows = take(rows);
    L.decode_queries = take(T);
    L.tiles = take(2 * static_cast<std::size_t>(T));
    L.inv_freq = take(static_cast<std::size_t>(S) * half);
    L.factor = take(S);
    L.page_ids = take(page_words);
    L.words = at;
  }
  if (auto err = meta_host.reserve(L.words * 4); err != cudaSuccess) {
    return cuda_error(err, "allocating pinned step metadata");
  }
  if (L.words * 4 > meta.bytes()) {
    // Headroom, so growing page tables rarely move the buffer (and invalidate graphs).
    drop_graphs();
    if (auto err = meta.reserve(L.words * 8 + (64u << 10)); err != cudaSuccess) {
      return cuda_error(err, "allocating step metadata");
    }
  }
  auto* words = meta_host.as<std::int32_t>();
  auto* floats = meta_host.as<float>();
  std::memcpy(words + L.tokens, batch.tokens.data(), T * sizeof(std::int32_t));
  std::memcpy(words + L.positions, batch.positions.data(), T * sizeof(std::int32_t));
  int decode_count = 0, tile_count = 0, decode_context = 0, row = 0;
  const int tile_queries = cuda::prefill_tile_queries(spec.head_dim);
  std::size_t page_at = 0;
  for (int s = 0; s < S; ++s) {
    const auto& seq = batch.sequences[static_cast<std::size_t>(s)];
    words[L.table_begin + s] = static_cast<std::int32_t>(page_at);
    std::copy(seq.page_table.begin(), seq.page_table.end(), words + L.page_ids + page_at);
    page_at += seq.page_table.size();
    int longest = 0;
    for (int i = seq.token_begin; i < seq.token_begin + seq.token_count; ++i) {
      words[L.token_seq + i] = s;
      longest = std::max(longest, batch.positions[static_cast<std::size_t>(i)] + 1);
    }
    if (seq.token_count > 0) {
      const int first = seq.all_logits ? seq.token_begin : seq.token_begin + seq.token_count - 1;
      for (int i = first; i < seq.token_begin + seq.token_count; ++i)
        words[L.logit_rows + row++] = i;
    }
    if (seq.token_count == 1) {
      words[L.decode_queries + decode_count++] = seq.token_begin;
      decode_context = std::max(decode_context, longest);
    } else {
      for (int i = 0; i < seq.token_count; i += tile_queries) {
        words[L.tiles + 2 * tile_count] = seq.token_begin + i;
        words[L.tiles + 2 * tile_count + 1] = std::min(tile_queries, seq.token_count - i);
        ++tile_count;
      }
    }
    if (R > 0) {
      const RopeFrequencies freqs =
          fixed_rope ? *fixed_rope : rope_frequencies(spec.rope, R, std::max(longest, 1));
      std::copy(freqs.inv_freq.begin(), freqs.inv_freq.end(),
                floats + L.inv_freq + static_cast<std::size_t>(s) * half);
      floats[L.factor + s] = freqs.attention_factor;
    } else {
      floats[L.factor + s] = 1.0f;
    }
  }
  const std::size_t split_floats =
      cuda::decode_workspace_floats(decode_count, spec.num_heads, spec.head_dim, decode_context);
  if (split_floats * 4 > split_workspace.bytes() ||
      static_cast<std::size_t>(rows) * V * 4 > logits.bytes()) {
    drop_graphs();
  }
  if (auto err = split_workspace.reserve(split_floats * 4); err != cudaSuccess) {
    return cuda_error(err, "allocating the attention split workspace");
  }
  if (auto err = logits.reserve(static_cast<std::size_t>(rows) * V * 4); err != cudaSuccess) {
    return cuda_error(err, "allocating device logits");
  }
  if (copy_logits) {
    if (auto err = logits_host.reserve(static_cast<std::size_t>(rows) * V * 4);
        err != cudaSuccess) {
      return cuda_error(err, "allocating pinned logits");
    }
  }
  if (auto err = cudaMemcpyAsync(meta.get(), meta_host.as<void>(), L.words * 4,
                                 cudaMemcpyHostToDevice, stream);
      err != cudaSuccess) {
    return cuda_error(err, "uploading step metadata");
  }

  const auto* dev = meta.as<std::int32_t>();
  const auto* dev_f = meta.as<float>();
  cuda::FlatBatchView fb;
  fb.positions = dev + L.positions;
  fb.token_seq = dev + L.token_seq;
  fb.page_table_begin = dev + L.table_begin;
  fb.page_ids = dev + L.page_ids;
  fb.num_tokens = T;
  cuda::PagedKvView kvv;
  kvv.pool = kv.get();
  kvv.precision = options.precision;
  kvv.page_elems = layout.floats_per_page();
  kvv.page_size = layout.page_size;
  kvv.num_kv_heads = layout.num_kv_heads;
  kvv.head_dim = layout.head_dim;

  const cuda::Precision P = options.precision;
  const int H = spec.hidden_size, I = spec.intermediate_size;
  const int QD = spec.q_dim(), KVD = spec.kv_dim();
  const int qkv_width = QD + 2 * KVD;
  const int mlp_width = spec.gated_mlp ? 2 * I : I;
  const auto norm_kind = spec.norm == Norm::kRms ? cuda::NormKind::kRms : cuda::NormKind::kLayer;
  const auto eps = static_cast<float>(spec.norm_epsilon);
  auto or_null = [](const DeviceBuffer& b) { return b.as<float>(); };
  bool blas_ok = true;
  // While profiling (set_kernel_profiling), steps record an event after each kernel class.
  marks_used = 0;
  auto mark = [&](const char* what) {
    if (!profiling) return;
    if (marks_used == marks.size()) {
      cudaEvent_t e = nullptr;
      if (cudaEventCreate(&e) != cudaSuccess) return;
      marks.emplace_back(what, e);
    }
    marks[marks_used].first = what;
    cudaEventRecord(marks[marks_used].second, stream);
    ++marks_used;
  };

  // Every kernel of the step, in order, on `stream`.
  auto enqueue = [&] {
    mark("start");
    cuda::embedding_gather(embedding.get(), P, dev + L.tokens, T, H, x.as<float>(), stream);
    mark("embedding");
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const Layer& W = layers[l];
      cuda::AddNormArgs an;
      an.residual = x.as<float>();
      if (l > 0) {
        an.delta = delta.as<float>();
        an.delta_bias = or_null(layers[l - 1].down_bias);
      }
      an.rows = T;
      an.n = H;
      an.kind = norm_kind;
      an.weight = W.attn_norm.as<float>();
      an.bias = or_null(W.attn_norm_bias);
      an.eps = eps;
      an.out = h.get();
      an.precision = P;
      cuda::add_norm(an, stream);
      mark("norm");
      blas_ok &= blas->linear(h.get(), T, W.qkv.get(), qkv_width, H, qkv_out.as<float>(), qkv_width,
                              P, stream);
      mark("qkv product");
      cuda::RopeArgs ra;
      ra.qkv = qkv_out.as<float>();
      ra.qkv_bias = or_null(W.qkv_bias);
      ra.num_heads = spec.num_heads;
      ra.rotary_dim = R;
      ra.interleaved = spec.rope.order == RopeOrder::kInterleaved;
      ra.inv_freq = dev_f + L.inv_freq;
      ra.attention_factor = dev_f + L.factor;
      kvv.layer_offset = l * layout.floats_per_layer_block();
      cuda::rope_store_kv(ra, fb, kvv, stream);
      mark("rope + kv store");
      cuda::AttentionArgs aa;
      aa.q = qkv_out.as<float>();
      aa.q_stride = static_cast<std::size_t>(qkv_width);
      aa.num_heads = spec.num_heads;
      aa.scale = 1.0f / std::sqrt(static_cast<float>(spec.head_dim));
      aa.sliding_window = spec.layer_uses_window(static_cast<int>(l)) ? spec.sliding_window : 0;
      aa.out = attn.get();
      cuda::decode_attention(aa, fb, kvv, dev + L.decode_queries, decode_count, decode_context,
                             split_workspace.as<float>(), stream);
      mark("decode attention");
      cuda::prefill_attention(aa, fb, kvv,
                              reinterpret_cast<const cuda::PrefillTile*>(dev + L.tiles), tile_count,
                              stream);
      mark("prefill attention");
      blas_ok &= blas->linear(attn.get(), T, W.o.get(), H, QD, delta.as<float>(), H, P, stream);
      mark("o product");
      an.delta = delta.as<float>();
      an.delta_bias = or_null(W.o_bias);
      an.weight = W.mlp_norm.as<float>();
      an.bias = or_null(W.mlp_norm_bias);
      cuda::add_norm(an, stream);
      mark("norm");
      blas_ok &=
          blas->linear(h.get(), T, W.up.get(), mlp_width, H, mlp.as<float>(), mlp_width, P, stream);
      mark("gate_up product");
      cuda::mlp_activation(to_kernel(spec.activation), spec.gated_mlp, mlp.as<float>(),
                           or_null(W.up_bias), T, I, act.get(), P, stream);
      mark("activation");
      blas_ok &= blas->linear(act.get(), T, W.down.get(), H, I, delta.as<float>(), H, P, stream);
      mark("down product");
    }
    // The last residual add and the final norm, only for the rows that need logits.
    cuda::AddNormArgs fin;
    fin.residual = x.as<float>();
    if (!layers.empty()) {
      fin.delta = delta.as<float>();
      fin.delta_bias = or_null(layers.back().down_bias);
    }
    fin.row_index = dev + L.logit_rows;
    fin.rows = rows;
    fin.n = H;
    fin.kind = norm_kind;
    fin.weight = final_norm.as<float>();
    fin.bias = or_null(final_norm_bias);
    fin.eps = eps;
    fin.write_back = false;
    fin.out = h.get();
    fin.precision = P;
    cuda::add_norm(fin, stream);
    mark("norm");
    const DeviceBuffer& head = lm_head.get() != nullptr ? lm_head : embedding;
    blas_ok &= blas->linear(h.get(), rows, head.get(), V, H, logits.as<float>(), V, P, stream);
    mark("lm_head product");
  };
  // A pure decode step of a shape seen before replays its CUDA graph: one launch instead of
  // ~10 per layer. The graph's kernels read this step's metadata from the same buffer.
  const bool graph_step = options.cuda_graphs && !graphs_broken && tile_count == 0 && !profiling;
  if (graph_step) {
    const GraphKey key{T, S, rows, cuda::decode_split_count(decode_context)};
    auto it = graphs.find(key);
    if (it == graphs.end()) {
      if (graphs.size() >= kMaxGraphs) drop_graphs();
      cuda::prepare_attention_kernels();
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      bool captured =
          cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
      if (captured) {
        enqueue();
        captured = cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph != nullptr;
      }
      captured = captured && blas_ok && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
      if (graph != nullptr) cudaGraphDestroy(graph);
      if (!captured) {
        // Capture is an optimisation: fall back to plain launches from now on.
        cudaGetLastError();
        graphs_broken = true;
        blas_ok = true;
        enqueue();
      } else {
        it = graphs.emplace(key, exec).first;
      }
    }
    if (it != graphs.end()) {
      if (auto err = cudaGraphLaunch(it->second, stream); err != cudaSuccess) {
        return cuda_error(err, "launching the step's graph");
      }
    }
  } else {
    enqueue();
  }
  if (auto err = cudaGetLastError(); err != cudaSuccess)
    return cuda_error(err, "launching the step");
  if (!blas_ok) return Error(ErrorCode::kInternal, "CUDA: a cuBLAS product failed in the step");
  if (!copy_logits) return {};
  // The logits, in up to kLogitChunks pieces: the host copies each out of pinned memory
  // (into logits_out, resized without a fill when its size is unchanged) while the next one
  // crosses the bus.
  const std::size_t count = static_cast<std::size_t>(rows) * V;
  if (copy_events.empty()) {
    copy_events.resize(kLogitChunks, nullptr);
    for (auto& e : copy_events) {
      if (auto err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming); err != cudaSuccess) {
        return cuda_error(err, "creating the logits copy events");
      }
    }
  }
  const std::size_t chunks =
      std::clamp<std::size_t>((count + kLogitChunkFloats - 1) / kLogitChunkFloats, 1, kLogitChunks);
  const std::size_t per_chunk = (count + chunks - 1) / chunks;
  const float* host = logits_host.as<float>();
  for (std::size_t k = 0; k < chunks; ++k) {
    const std::size_t begin = std::min(count, k * per_chunk);
    const std::size_t n = std::min(per_chunk, count - begin);
    if (auto err = cudaMemcpyAsync(logits_host.as<float>() + begin, logits.as<float>() + begin,
                                   n * 4, cudaMemcpyDeviceToHost, stream);
        err != cudaSuccess) {
      return cuda_error(err, "copying logits to the host");
    }
    if (auto err = cudaEventRecord(copy_events[k], stream); err != cudaSuccess) {
      return cuda_error(err, "copying logits to the host");
    }
  }
  logits_out.resize(count);
  for (std::size_t k = 0; k < chunks; ++k) {
    const std::size_t begin = std::min(count, k * per_chunk);
    const std::size_t n = std::min(per_chunk, count - begin);
    if (auto err = cudaEventSynchronize(copy_events[k]); err != cudaSuccess) {
      return cuda_error(err, "running the step");
    }
    std::memcpy(logits_out.data() + begin, host + begin, n * 4);
  }
  if (auto err = cudaStreamSynchronize(stream); err != cudaSuccess) {
    return cuda_error(err, "running the step");
  }
  if (profiling) {
    for (std::size_t i = 1; i < marks_used; ++i) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, marks[i - 1].second, marks[i].second) == cudaSuccess) {
        profile_ms[marks[i].first] += ms;
      }
    }
  }
  return {};
}

Result<void> CudaModel::State::sample(const DeviceSamplingInput& in, DeviceSamplingOutput& out) {
  using sampling::DeviceCandidate;
  using sampling::DeviceSampleResult;
  using sampling::DeviceSampleStatus;
  const int V = spec.vocab_size;
  const auto n = static_cast<int>(in.rows.size());
  out.results.assign(in.rows.size(), DeviceSampleResult{});
  out.candidates.clear();
  out.top.clear();
  out.host_rows.assign(in.rows.size(), {});
  if (launched_rows < 0) {
    return Error(ErrorCode::kInternal, "CUDA sampler: no step was launched to sample from");
  }
  const int step_rows = launched_rows;
  launched_rows = -1;  // each launched step is sampled once
  if (auto err = cudaSetDevice(options.device); err != cudaSuccess) {
    return cuda_error(err, "selecting device " + std::to_string(options.device));
  }
  for (const auto& r : in.rows) {
    const bool mask_ok =
        r.mask_word_offset < 0 ||
        static_cast<std::size_t>(r.mask_word_offset) + (static_cast<std::size_t>(V) + 31) / 32 <=
            in.masks.size();
    const bool edits_ok = r.edit_begin >= 0 && r.edit_count >= 0 &&
                          static_cast<std::size_t>(r.edit_begin) + r.edit_count <= in.edits.size();
    if (r.row < 0 || r.row >= step_rows || !mask_ok || !edits_ok || r.logprobs < 0 ||
        r.logprobs > sampling::kDeviceTopEntries) {
      cudaStreamSynchronize(stream);
      return Error(ErrorCode::kInternal, "CUDA sampler: row " + std::to_string(r.row) +
                                             " of a step with " + std::to_string(step_rows) +
                                             " logit rows has an invalid description");
    }
  }
  for (const auto& e : in.edits) {
    if (e.id < 0 || e.id >= V) {
      cudaStreamSynchronize(stream);
      return Error(ErrorCode::kInternal, "CUDA sampler: edit of token " + std::to_string(e.id) +
                                             " outside the vocabulary");
    }
  }
  if (n == 0) {
    if (auto err = cudaStreamSynchronize(stream); err != cudaSuccess) {
      return cuda_error(err, "running the step");
    }
    return {};
  }
  const auto align = [](std::size_t v) { return (v + 15) / 16 * 16; };
  const std::size_t rows_bytes = in.rows.size() * sizeof(sampling::DeviceSampleRow);
  const std::size_t edits_at = align(rows_bytes);
  const std::size_t masks_at =
      align(edits_at + in.edits.size() * sizeof(sampling::DeviceSampleEdit));
  const std::size_t in_bytes = masks_at + in.masks.size() * 4;
  // Output: results, top entries and the pool's fill count first (copied back together),
  // then the candidate pool (copied back as far as it was filled).
  const std::size_t top_at = align(in.rows.size() * sizeof(DeviceSampleResult));
  const std::size_t top_count = in.rows.size() * sampling::kDeviceTopEntries;
  const std::size_t used_at = align(top_at + top_count * sizeof(DeviceCandidate));
  const std::size_t head_bytes = used_at + 16;
  const std::size_t cand_count = std::min<std::size_t>(
      sampling::kDeviceCandidatePool, in.rows.size() * sampling::kDeviceCandidatesPerRow);
  const std::size_t cand_at = head_bytes;
  const std::size_t out_bytes = cand_at + cand_count * sizeof(DeviceCandidate);
  for (auto [buffer, bytes] : {std::pair{&sample_in, in_bytes}, std::pair{&sample_out, out_bytes},
                               std::pair{&sample_work, in.rows.size() * V * 4}}) {
    if (auto err = buffer->reserve(bytes); err != cudaSuccess) {
      return cuda_error(err, "allocating the sampler's buffers");
    }
  }
  if (auto err = sample_in_host.reserve(in_bytes); err != cudaSuccess) {
    return cuda_error(err, "allocating the sampler's pinned buffers");
  }
  if (auto err = sample_out_host.reserve(out_bytes); err != cudaSuccess) {
    return cuda_error(err, "allocating the sampler's pinned buffers");
  }
  auto* host_in = sample_in_host.as<unsigned char>();
  std::memcpy(host_in, in.rows.data(), rows_bytes);
  if (!in.edits.empty())
    std::memcpy(host_in + edits_at, in.edits.data(),
                in.edits.size() * sizeof(sampling::DeviceSampleEdit));
  if (!in.masks.empty()) std::memcpy(host_in + masks_at, in.masks.data(), in.masks.size() * 4);
  if (auto err =
          cudaMemcpyAsync(sample_in.get(), host_in, in_bytes, cudaMemcpyHostToDevice, stream);
      err != cudaSuccess) {
    return cuda_error(err, "uploading the sampler's rows");
  }
  auto* dev_in = sample_in.as<unsigned char>();
  auto* dev_out = sample_out.as<unsigned char>();
  cuda::SampleArgs args;
  args.logits = logits.as<float>();
  args.work = sample_work.as<float>();
  args.vocab = V;
  args.rows = reinterpret_cast<const sampling::DeviceSampleRow*>(dev_in);
  args.num_rows = n;
  args.edits = reinterpret_cast<const sampling::DeviceSampleEdit*>(dev_in + edits_at);
  args.masks = reinterpret_cast<const std::uint32_t*>(dev_in + masks_at);
  args.results = reinterpret_cast<DeviceSampleResult*>(dev_out);
  args.candidates = reinterpret_cast<DeviceCandidate*>(dev_out + cand_at);
  args.candidate_capacity = static_cast<int>(cand_count);
  args.candidates_used = reinterpret_cast<unsigned*>(dev_out + used_at);
  args.top = reinterpret_cast<DeviceCandidate*>(dev_out + top_at);
  cuda::sample_rows(args, stream);
  if (auto err = cudaGetLastError(); err != cudaSuccess) {
    return cuda_error(err, "launching the sampler");
  }
  auto* host_out = sample_out_host.as<unsigned char>();
  if (auto err = cudaMemcpyAsync(host_out, dev_out, head_bytes, cudaMemcpyDeviceToHost, stream);
      err != cudaSuccess) {
    return cuda_error(err, "copying the sampled tokens to the host");
  }
  if (auto err = cudaStreamSynchronize(stream); err != cudaSuccess) {
    return cuda_error(err, "running the step");
  }
  std::memcpy(out.results.data(), host_out, in.rows.size() * sizeof(DeviceSampleResult));
  out.top.resize(top_count);
  std::memcpy(out.top.data(), host_out + top_at, top_count * sizeof(DeviceCandidate));
  unsigned used = 0;
  std::memcpy(&used, host_out + used_at, sizeof used);
  used = std::min<unsigned>(used, static_cast<unsigned>(cand_count));
  if (used > 0) {
    if (auto err = cudaMemcpyAsync(host_out + cand_at, dev_out + cand_at,
                                   used * sizeof(DeviceCandidate), cudaMemcpyDeviceToHost, stream);
        err != cudaSuccess) {
      return cuda_error(err, "copying the sampler's candidates to the host");
    }
    if (auto err = cudaStreamSynchronize(stream); err != cudaSuccess) {
      return cuda_error(err, "running the step");
    }
  }
  out.candidates.resize(used);
  if (used > 0)
    std::memcpy(out.candidates.data(), host_out + cand_at, used * sizeof(DeviceCandidate));
  for (std::size_t k = 0; k < in.rows.size(); ++k) {
    if (out.results[k].status != DeviceSampleStatus::kHostRow) continue;
    auto& row = out.host_rows[k];
    row.resize(static_cast<std::size_t>(V));
    if (auto err = cudaMemcpy(row.data(),
                              logits.as<float>() + static_cast<std::size_t>(in.rows[k].row) * V,
                              static_cast<std::size_t>(V) * 4, cudaMemcpyDeviceToHost);
        err != cudaSuccess) {
      return cuda_error(err, "copying a logits row to the host");
    }
  }
  return {};
}

}  // namespace weft::model
