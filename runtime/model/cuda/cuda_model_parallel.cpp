// CudaModel under tensor parallelism (docs/parallel.md): joining a group whose collectives
// run on the model's stream. The all-reduces themselves are in the forward pass
// (cuda_model.cpp, after the o and down products).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <span>

#include "runtime/model/cuda/cuda_model_state.hpp"

namespace weft::model {

void* CudaModel::cuda_stream() const noexcept {
  return state_->stream;
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
  // a warm-up all-gather of one row's shards, like the all-reduces above.
  const char* v = std::getenv("WEFT_TP_VOCAB_PARALLEL");
  const bool vocab = (v == nullptr || std::strcmp(v, "0") != 0) && s.lm_head_q.get() == nullptr;
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
  }
  // bf16 all-reduces of o's and down's outputs for steps of WEFT_TP_BF16_REDUCE_TOKENS tokens or
  // more (bf16 models only; unset or 0: off), warmed up like the fp32 ones.
  int reduce16 = 0;
  if (const char* t = std::getenv("WEFT_TP_BF16_REDUCE_TOKENS");
      t != nullptr && s.options.precision == cuda::Precision::kBF16) {
    reduce16 = std::max(0, std::atoi(t));
  }
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
  if (auto err = cudaStreamSynchronize(s.stream); err != cudaSuccess) {
    return cuda_error(err, "joining the tensor-parallel group");
  }
  s.drop_graphs();  // graphs captured before have no all-reduces
  s.tensor_parallel = &comm;
  s.vocab_parallel = vocab;
  s.bf16_reduce_tokens = reduce16;
  return {};
}

bool CudaModel::vocab_parallel_head() const noexcept {
  return state_->tensor_parallel != nullptr && state_->vocab_parallel;
}

int CudaModel::bf16_reduce_tokens() const noexcept {
  return state_->tensor_parallel != nullptr ? state_->bf16_reduce_tokens : 0;
}

}  // namespace weft::model
