// CudaModel under tensor parallelism (docs/parallel.md): joining a group whose collectives
// run on the model's stream. The all-reduces themselves are in the forward pass
// (cuda_model_enqueue.cpp, after the o and down products).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>

#include "runtime/model/cuda/cuda_model_state.hpp"
#include "runtime/model/kv_compress_forward.hpp"
#include "runtime/parallel/communicator.hpp"

namespace weft::model {
namespace {

// Puts the buffers the group's collectives run on into its collective memory of `kind`
// (WEFT_TP_NCCL_BUFFERS): `delta` (o's and down's outputs, all-reduced in place), `delta16`
// (their bf16 form, with bf16 all-reduces) and, for the vocab-parallel head, its shard and
// gathered logits for steps of up to WEFT_TP_NCCL_HEAD_ROWS (64) rows. Every rank asks for the
// same sizes in the same order (the spec, the step capacity and the environment are the same
// on every rank), and the communicator makes every rank succeed or fail alike, so a buffer
// that falls back to plain memory does so on every rank.
void use_collective_memory(CudaModel::State& s, parallel::Communicator& comm,
                           parallel::CollectiveMemoryKind kind, bool vocab, bool reduce16) {
  std::string made, fell_back;
  auto take = [&](std::size_t bytes, const char* what) -> void* {
    auto m = comm.collective_memory(bytes, kind);
    if (!m) {
      fell_back += std::string(fell_back.empty() ? "" : "; ") + what + ": " + m.error().what();
      return nullptr;
    }
    s.tp_fence = s.tp_fence || m->fence_before_collectives;
    if (made.empty())
      made = m->description + " for ";
    else
      made += ", ";
    made += what;
    return m->data;
  };
  const auto H = static_cast<std::size_t>(s.spec.hidden_size);
  const auto T = static_cast<std::size_t>(std::max(1, s.capacity_tokens));
  if (void* p = take(T * H * 4, "the fp32 all-reduces")) s.delta.adopt(p, T * H * 4);
  if (reduce16) {
    if (void* p = take(T * H * 2, "the bf16 all-reduces")) s.delta16.adopt(p, T * H * 2);
  }
  int rows = 64;
  if (const char* r = std::getenv("WEFT_TP_NCCL_HEAD_ROWS"); r != nullptr && *r != '\0') {
    rows = std::max(0, std::atoi(r));
  }
  rows = std::min(rows, static_cast<int>(T));
  if (vocab && rows > 0) {
    const int N = comm.size();
    const auto shard = static_cast<std::size_t>((s.spec.vocab_size + N - 1) / N);
    const std::size_t bytes = static_cast<std::size_t>(rows) * shard * 4;
    auto* mine = static_cast<float*>(take(bytes, "the head's shard"));
    auto* all =
        mine != nullptr ? static_cast<float*>(take(bytes * N, "the head's all-gather")) : nullptr;
    if (mine != nullptr && all != nullptr) {
      s.head_window_shard = mine;
      s.head_window_gathered = all;
      s.head_window_rows = rows;
    }
  }
  s.tp_buffers = made.empty() ? std::string("plain device memory") : made;
  if (s.tp_fence) s.tp_buffers += " (a fence kernel before each collective on it)";
  if (!fell_back.empty()) {
    s.tp_buffers += std::string(made.empty() ? "" : "; ") + "plain device memory, " +
                    parallel::collective_memory_kind_name(kind) + " refused (" + fell_back + ")";
  }
}

}  // namespace

void* CudaModel::cuda_stream() const noexcept {
  return state_->stream;
}

Result<void> CudaModel::enqueue_layers(const StepBatch& batch, const float* hidden_in, float* out) {
  State& s = *state_;
  s.launched_rows = -1;
  if (batch.has_token_tree()) {
    return Error(ErrorCode::kInvalidArgument,
                 "token trees need tree attention, which a CUDA pipeline stage does not have yet");
  }
  KvLayout whole = s.layout;
  whole.num_layers = s.spec.num_layers;
  if (auto ok = refuse_head_cells(batch, "CUDA model"); !ok) return ok;
  if (auto ok = check_step_batch(s.spec, batch, whole, s.num_pages); !ok) return ok;
  if (!s.embeds && hidden_in == nullptr) {
    return Error(ErrorCode::kInvalidArgument,
                 "a stage from layer " + std::to_string(s.first_layer) +
                     " takes the residual stream of the stage before; none was given");
  }
  if (!s.ends && out == nullptr) {
    return Error(ErrorCode::kInvalidArgument, "a stage before the last needs an output buffer");
  }
  s.device_stage = true;
  s.stage_in_device = s.embeds ? nullptr : hidden_in;
  s.stage_out_device = out;
  std::vector<float> unused;
  auto ran = s.run(batch, unused, /*copy_logits=*/false);
  s.device_stage = false;
  s.stage_in_device = nullptr;
  s.stage_out_device = nullptr;
  return ran;
}

Result<void> CudaModel::set_tensor_parallel(parallel::Communicator& comm) {
  State& s = *state_;
  if (!comm.device_buffers()) {
    return Error(ErrorCode::kInvalidArgument,
                 "CUDA model: tensor parallelism needs a communicator over device buffers "
                 "(nccl), not " +
                     comm.name());
  }
  if (auto err = cudaSetDevice(s.options.device); err != cudaSuccess) {
    return cuda_error(err, "selecting device " + std::to_string(s.options.device));
  }
  // Which memory the collectives run on, and the head and bf16 switches (read below too).
  // Unset: plain memory for two ranks, NCCL's symmetric windows from four (measured on four
  // H200s: a batch-1 8B step 9% shorter, batch 64 level; on two ranks they gain 3% at batch 1
  // and lose 2% at 64; docs/parallel.md, "NCCL buffers"). A refused window falls back to plain.
  const char* asked = std::getenv("WEFT_TP_NCCL_BUFFERS");
  auto buffers = parallel::parse_collective_memory_kind(
      asked != nullptr ? asked : (comm.size() >= 4 ? "symmetric" : ""));
  if (!buffers) return buffers.error();
  auto fused = s.fused_norm_switches(comm);  // compared over the group (collective)
  if (!fused) return fused.error();
  const char* v = std::getenv("WEFT_TP_VOCAB_PARALLEL");
  const bool vocab = (v == nullptr || std::strcmp(v, "0") != 0) && s.lm_head_q.get() == nullptr;
  // bf16 all-reduces from 128 tokens by default (bf16 models): prefill and mixed steps, whose
  // all-reduces carry megabytes (docs/parallel.md, "Large steps").
  int reduce16 = 0;
  if (s.options.precision == cuda::Precision::kBF16) {
    const char* t = std::getenv("WEFT_TP_BF16_REDUCE_TOKENS");
    reduce16 = t != nullptr && *t != '\0' ? std::max(0, std::atoi(t)) : 128;
  }
  s.drop_graphs();  // they point at the buffers about to move
  // One-token steps through the small-step kernel unless the options chose (CudaModelOptions).
  if (s.options.small_step_kernel_tokens < 0) s.blas->set_gemv_max_tokens(comm.size() >= 2 ? 1 : 0);
  // 128-key decode segments in a group unless chosen (CudaModelOptions::decode_segment_keys).
  // The environment's segment, when set, stays every kernel's (comparisons).
  if (s.options.decode_segment_keys < 0) {
    const char* seg = std::getenv("WEFT_DECODE_STREAM_SEGMENT_KEYS");
    s.decode_segment_keys = comm.size() >= 2 && (seg == nullptr || *seg == '\0') ? 128 : 0;
  }
  s.tp_fence = false;
  s.tp_buffers = "plain device memory";
  s.head_window_shard = s.head_window_gathered = nullptr;
  s.head_window_rows = 0;
  if (*buffers != parallel::CollectiveMemoryKind::kPlain) {
    use_collective_memory(s, comm, *buffers, vocab, reduce16 > 0 && s.capacity_tokens > 0);
  }
  // Rank 0 holds the row-parallel biases, the others zeros (sharded_weights): after the sum
  // every rank holds the whole bias and adds it once, after the step's all-reduce. Every rank
  // has the same layers and the same bias tensors, so the calls match across the group.
  const auto H = static_cast<std::size_t>(s.spec.hidden_size);
  for (auto& layer : s.layers) {
    for (DeviceBuffer* bias : {&layer.o_bias, &layer.down_bias}) {
      if (bias->get() == nullptr) continue;
      if (auto ok = comm.all_reduce_sum(std::span<float>(bias->as<float>(), H)); !ok) return ok;
    }
  }
  // A few all-reduces of the sizes steps use, before any step is captured into a graph: the
  // communicator sets up its connections on first use, outside a capture.
  for (int tokens : {1, 16, 256, s.capacity_tokens}) {
    const int n = std::min(tokens, s.capacity_tokens);
    if (n < 1) continue;
    if (auto ok = comm.all_reduce_sum(
            std::span<float>(s.delta.as<float>(), static_cast<std::size_t>(n) * H));
        !ok) {
      return ok;
    }
  }
  // The vocab-parallel head (a 16-bit one): WEFT_TP_VOCAB_PARALLEL=0 keeps it whole on every
  // rank, for comparisons. Every rank reads the same variable (mpirun -x), so the group agrees;
  // a warm-up all-gather of one row's shards, like the all-reduces above (in the collective
  // memory too when the head has some).
  if (vocab) {
    const int V = s.spec.vocab_size;
    const std::size_t shard = static_cast<std::size_t>((V + comm.size() - 1) / comm.size());
    if (auto err = s.head_shard.reserve(shard * 4); err != cudaSuccess) {
      return cuda_error(err, "allocating the vocab-parallel head's logits");
    }
    if (auto err = s.head_gathered.reserve(shard * 4 * comm.size()); err != cudaSuccess) {
      return cuda_error(err, "allocating the vocab-parallel head's gathered logits");
    }
    if (auto ok =
            comm.all_gather(std::span<const float>(s.head_shard.as<float>(), shard),
                            std::span<float>(s.head_gathered.as<float>(), shard * comm.size()));
        !ok) {
      return ok;
    }
    if (s.head_window_rows > 0) {
      if (auto ok = comm.all_gather(std::span<const float>(s.head_window_shard, shard),
                                    std::span<float>(s.head_window_gathered, shard * comm.size()));
          !ok) {
        return ok;
      }
    }
  }
  // bf16 all-reduces of o's and down's outputs for steps of WEFT_TP_BF16_REDUCE_TOKENS tokens or
  // more (bf16 models only; unset or 0: off), warmed up like the fp32 ones.
  if (reduce16 > 0 && s.capacity_tokens > 0) {
    if (auto err = s.delta16.reserve(static_cast<std::size_t>(s.capacity_tokens) * H * 2);
        err != cudaSuccess) {
      return cuda_error(err, "allocating the bf16 all-reduce buffer");
    }
    for (int tokens : {1, 16, 256, s.capacity_tokens}) {
      const int n = std::min(tokens, s.capacity_tokens);
      if (auto ok = comm.all_reduce_sum_bf16(std::span<std::uint16_t>(
              s.delta16.as<std::uint16_t>(), static_cast<std::size_t>(n) * H));
          !ok) {
        return ok;
      }
    }
  }
  // The fused all-reduce and norm (WEFT_TP_FUSED_NORM): its window, barriers and check.
  if (auto ok = s.join_fused_norm(comm, *fused); !ok) return ok;
  if (auto err = cudaStreamSynchronize(s.stream); err != cudaSuccess) {
    return cuda_error(err, "joining the tensor-parallel group");
  }
  s.drop_graphs();  // graphs captured before have no all-reduces
  s.tensor_parallel = &comm;
  s.vocab_parallel = vocab;
  s.bf16_reduce_tokens = reduce16;
  return {};
}

Result<void> CudaModel::adopt_logits(const float* logits, int rows) {
  State& s = *state_;
  s.launched_rows = -1;
  if (rows < 0) return Error(ErrorCode::kInvalidArgument, "adopt_logits: negative row count");
  if (auto err = cudaSetDevice(s.options.device); err != cudaSuccess) {
    return cuda_error(err, "selecting device " + std::to_string(s.options.device));
  }
  const std::size_t bytes = static_cast<std::size_t>(rows) * s.spec.vocab_size * 4;
  if (bytes > s.logits.bytes()) {
    // The buffer moves: nothing may still read it, and no graph may point at it.
    if (auto err = cudaStreamSynchronize(s.stream); err != cudaSuccess) {
      return cuda_error(err, "waiting before the logits buffer grows");
    }
    s.drop_graphs();
    if (auto err = s.logits.reserve(bytes); err != cudaSuccess) {
      return cuda_error(err, "allocating device logits");
    }
  }
  cudaPointerAttributes where{};
  const bool on_device =
      cudaPointerGetAttributes(&where, logits) == cudaSuccess && where.type == cudaMemoryTypeDevice;
  cudaGetLastError();  // an unregistered host pointer may leave an error on older runtimes
  if (bytes > 0) {
    if (auto err = cudaMemcpyAsync(s.logits.get(), logits, bytes, cudaMemcpyDefault, s.stream);
        err != cudaSuccess) {
      return cuda_error(err, "copying the step's logits");
    }
    if (!on_device) {
      // Host memory the caller reuses after this returns.
      if (auto err = cudaStreamSynchronize(s.stream); err != cudaSuccess) {
        return cuda_error(err, "copying the step's logits");
      }
    }
  }
  s.launched_rows = rows;
  return {};
}

bool CudaModel::vocab_parallel_head() const noexcept {
  return state_->tensor_parallel != nullptr && state_->vocab_parallel;
}

int CudaModel::bf16_reduce_tokens() const noexcept {
  return state_->tensor_parallel != nullptr ? state_->bf16_reduce_tokens : 0;
}

std::string CudaModel::tensor_parallel_buffers() const {
  return state_->tensor_parallel != nullptr ? state_->tp_buffers : "no tensor-parallel group";
}

int CudaModel::fused_norm_tokens() const noexcept {
  return state_->tensor_parallel != nullptr ? state_->tp_fused_rows : 0;
}

std::string CudaModel::fused_norm() const {
  return state_->tensor_parallel != nullptr ? state_->tp_fused_note : "no tensor-parallel group";
}

}  // namespace weft::model
