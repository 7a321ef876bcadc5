// CudaModel: the forward pass as a sequence of kernel launches on one stream
// (kernels/cuda/*). A step (State::run) is prepared on the host (metadata and buffers,
// cuda_model_prepare.cpp), its kernels enqueued (cuda_model_enqueue.cpp), plainly or as a
// replayed CUDA graph (here), and its logits copied back; creation and weight upload are in
// cuda_model_load.cpp, the GPU sampler's host side in cuda_sampling.cpp.

#include "runtime/model/cuda/cuda_model.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <span>

#include "kernels/cuda/gemv_rows.hpp"
#include "kernels/cuda/paged_attention.hpp"
#include "runtime/model/cuda/cuda_model_state.hpp"
#include "runtime/model/kv_compress_forward.hpp"

namespace weft::model {

namespace {

// The batch checks against the whole model's layer count (a stage's pool holds fewer).
Result<void> check_stage_batch(const CudaModel::State& s, const StepBatch& batch) {
  KvLayout whole = s.layout;
  whole.num_layers = s.spec.num_layers;
  if (auto ok = refuse_head_cells(batch, "CUDA model"); !ok) return ok;
  return check_step_batch(s.spec, batch, whole, s.num_pages);
}

Result<void> refuse_partial(const CudaModel::State& s) {
  if (s.embeds && s.ends) return {};
  return Error(ErrorCode::kInvalidArgument,
               "this CUDA model holds layers [" + std::to_string(s.first_layer) + ", " +
                   std::to_string(s.first_layer + s.layout.num_layers) +
                   ") of a pipeline: it runs through forward_layers");
}

}  // namespace

Result<void> CudaModel::forward(const StepBatch& batch, std::vector<float>& logits) {
  state_->launched_rows = -1;  // a step launched before is no longer there to sample
  if (auto ok = refuse_partial(*state_); !ok) return ok;
  if (batch.has_token_tree() && !supports_token_trees()) {
    return Error(ErrorCode::kInvalidArgument,
                 "token trees on an ALiBi model (Bloom): tree attention has no ALiBi bias yet "
                 "(speculate with a tree width of 1)");
  }
  if (auto ok = check_stage_batch(*state_, batch); !ok) return ok;
  return state_->run(batch, logits);
}

LayerRange CudaModel::layers() const noexcept {
  return {state_->first_layer, state_->layout.num_layers};
}

Result<void> CudaModel::forward_layers(const StepBatch& batch, std::span<const float> hidden_in,
                                       std::vector<float>& out) {
  State& s = *state_;
  s.launched_rows = -1;
  if (batch.has_token_tree()) {
    return Error(ErrorCode::kInvalidArgument,
                 "token trees need tree attention, which the CUDA model does not have yet");
  }
  if (auto ok = check_stage_batch(s, batch); !ok) return ok;
  const std::size_t want = batch.tokens.size() * static_cast<std::size_t>(s.spec.hidden_size);
  if (!s.embeds && hidden_in.size() != want) {
    return Error(ErrorCode::kInvalidArgument,
                 "a stage from layer " + std::to_string(s.first_layer) + " takes " +
                     std::to_string(want) + " hidden values from the stage before, got " +
                     std::to_string(hidden_in.size()));
  }
  s.stage_in = s.embeds ? nullptr : hidden_in.data();
  s.stage_out = s.ends ? nullptr : &out;
  auto ran = s.run(batch, out);
  s.stage_in = nullptr;
  s.stage_out = nullptr;
  return ran;
}

Result<void> CudaModel::launch(const StepBatch& batch) {
  state_->launched_rows = -1;
  if (batch.has_token_tree() && !supports_token_trees()) {
    return Error(ErrorCode::kInvalidArgument,
                 "token trees on an ALiBi model (Bloom): tree attention has no ALiBi bias yet");
  }
  if (auto ok = refuse_partial(*state_); !ok) return ok;
  if (auto ok = check_stage_batch(*state_, batch); !ok) return ok;
  std::vector<float> unused;
  if (auto r = state_->run(batch, unused, false); !r) return r;
  state_->launched_rows = batch.logit_rows();
  return {};
}

// CudaModelOptions::row_kernel_tokens, or WEFT_ROW_KERNEL_TOKENS where set; at most
// cuda::kGemvRowsMax.
int cuda_model_detail::row_kernel_limit(const CudaModelOptions& options) {
  static const int env = [] {
    const char* v = std::getenv("WEFT_ROW_KERNEL_TOKENS");
    return v != nullptr ? std::atoi(v) : -1;
  }();
  return std::clamp(env >= 0 ? env : options.row_kernel_tokens, 0, cuda::kGemvRowsMax);
}

int CudaModel::exact_verify_rows() const noexcept {
  return row_kernel_limit(state_->options);
}

bool CudaModel::runs_greedy_chains() const noexcept {
  return state_->tensor_parallel == nullptr;
}

Result<void> CudaModel::greedy_chain(const StepBatch& first, int steps,
                                     std::vector<std::int32_t>& tokens) {
  state_->launched_rows = -1;
  if (auto ok = refuse_partial(*state_); !ok) return ok;
  if (first.has_token_tree()) {
    return Error(ErrorCode::kInvalidArgument, "a greedy chain's first step has a token tree");
  }
  if (auto ok = check_stage_batch(*state_, first); !ok) return ok;
  return state_->greedy_chain(first, steps, tokens);
}

bool CudaModel::supports_token_trees() const noexcept {
  return state_->alibi_slopes.get() == nullptr;
}

std::uint64_t CudaModel::last_prepare_ns() const noexcept {
  return state_->last_prepare_ns;
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
  if (meta_pending) {
    // The step before was enqueued without a wait (a greedy chain): its metadata upload must
    // have left meta_host before this step writes it.
    meta_pending = false;
    if (auto err = cudaEventSynchronize(meta_event); err != cudaSuccess) {
      return cuda_error(err, "waiting for the previous step's metadata upload");
    }
  }
  const auto prepare_start = std::chrono::steady_clock::now();
  if (auto r = reserve_step(T); !r) return r;
  PreparedStep step;
  if (auto r = prepare_step(batch, copy_logits, step); !r) return r;
  last_prepare_ns = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                   std::chrono::steady_clock::now() - prepare_start)
                                                   .count());
  const int rows = step.rows, tile_count = step.tile_count, decode_context = step.decode_context;
  const bool has_tree = step.has_tree, has_verify = step.has_verify, has_offsets = step.has_offsets,
             compressing = step.compressing;
  const int H = spec.hidden_size;
  // While profiling (set_kernel_profiling), steps record an event after each kernel class
  // (enqueue_step).
  marks_used = 0;
  if (alibi_slopes.get() != nullptr && kv_dtype_scaled(layout.dtype)) {
    return Error(ErrorCode::kUnsupported,
                 "ALiBi attention (Bloom) reads 16-bit KV pages only; run with "
                 "--kv-cache-dtype auto");
  }
  bool& blas_ok = step.blas_ok;
  const bool& reduce_ok = step.reduce_ok;
  // Every kernel of the step, in order, on `stream`.
  auto enqueue = [&] { enqueue_step(step); };
  // A pure decode step of a shape seen before replays its CUDA graph: one launch instead of
  // ~10 per layer. The graph's kernels read this step's metadata from the same buffer.
  const bool graph_step = options.cuda_graphs && !graphs_broken && tile_count == 0 && !has_tree &&
                          !compressing && !profiling && ((embeds && ends) || device_stage);
  if (graph_step) {
    const int splits = cuda::decode_split_count(decode_context);
    const GraphKey key{
        T, S, rows, splits, has_verify, has_offsets, stage_in_device, stage_out_device};
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
  if (!reduce_ok) {
    return Error(ErrorCode::kInternal,
                 "CUDA: a tensor-parallel all-reduce (" + tensor_parallel->name() + ") failed");
  }
  if (!ends && !device_stage) {
    // The residual stream to the host, for the next stage.
    stage_out->resize(static_cast<std::size_t>(T) * H);
    if (auto err = cudaMemcpyAsync(stage_out->data(), x.get(), stage_out->size() * 4,
                                   cudaMemcpyDeviceToHost, stream);
        err != cudaSuccess) {
      return cuda_error(err, "copying the stage's hidden state to the host");
    }
    if (auto err = cudaStreamSynchronize(stream); err != cudaSuccess) {
      return cuda_error(err, "running the stage");
    }
    return {};
  }
  if (!copy_logits) {
    // Launched only; a profiled step waits here so its kernel times can be read.
    if (profiling) {
      if (auto err = cudaStreamSynchronize(stream); err != cudaSuccess) {
        return cuda_error(err, "running the step");
      }
      accumulate_profile();
    }
    return {};
  }
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
  if (profiling) accumulate_profile();
  return {};
}

}  // namespace weft::model
