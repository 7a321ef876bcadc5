#include "runtime/model/cuda/cuda_kv_compress.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "runtime/model/cuda/cuda_common.hpp"

namespace weft::model {

Result<bool> CudaKvCompress::prepare(const StepBatch& batch, int num_heads, int num_kv_heads,
                                     cudaStream_t stream) {
  host_jobs_.clear();
  args_ = {};
  std::size_t floats = 0;
  for (std::size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceSlice& seq = batch.sequences[s];
    if (seq.compress_evict <= 0 || seq.token_count < 1) continue;
    const auto last = static_cast<std::size_t>(seq.token_begin + seq.token_count - 1);
    cuda::KvCompressJob job;
    job.seq = static_cast<std::int32_t>(s);
    job.queries = std::min(seq.compress_window, seq.token_count);
    job.first_query = seq.token_begin + seq.token_count - job.queries;
    job.slots = batch.positions[last] - seq.slot_offset + 1;
    job.evict = seq.compress_evict;
    job.protect = seq.compress_window;
    job.offset = static_cast<std::int32_t>(floats);
    floats += static_cast<std::size_t>(num_kv_heads) * job.slots;
    args_.max_queries = std::max(args_.max_queries, job.queries);
    args_.max_slots = std::max(args_.max_slots, job.slots);
    host_jobs_.push_back(job);
  }
  if (host_jobs_.empty()) return false;
  if (floats > static_cast<std::size_t>(INT32_MAX)) {
    return Error(ErrorCode::kInvalidArgument,
                 "KV-Compress: the step's compressing sequences hold " + std::to_string(floats) +
                     " (kv head, slot) scores, more than a 32-bit offset addresses");
  }
  args_.num_jobs = static_cast<int>(host_jobs_.size());
  args_.num_heads = num_heads;
  const std::size_t stat_floats =
      cuda::kv_compress_row_stat_floats(args_.num_jobs, args_.max_queries, num_heads);
  if (auto err = jobs_.reserve(host_jobs_.size() * sizeof(cuda::KvCompressJob));
      err != cudaSuccess) {
    return cuda_detail::cuda_error(err, "allocating the KV-Compress jobs");
  }
  if (auto err = row_stats_.reserve(stat_floats * sizeof(float)); err != cudaSuccess) {
    return cuda_detail::cuda_error(err, "allocating the KV-Compress row statistics");
  }
  if (auto err = scores_.reserve(floats * sizeof(float)); err != cudaSuccess) {
    return cuda_detail::cuda_error(err, "allocating the KV-Compress scores");
  }
  if (auto err = kept_.reserve(floats * sizeof(std::int32_t)); err != cudaSuccess) {
    return cuda_detail::cuda_error(err, "allocating the KV-Compress kept slots");
  }
  // Pageable memory: the copy has left host_jobs_ when cudaMemcpyAsync returns.
  if (auto err = cudaMemcpyAsync(jobs_.get(), host_jobs_.data(),
                                 host_jobs_.size() * sizeof(cuda::KvCompressJob),
                                 cudaMemcpyHostToDevice, stream);
      err != cudaSuccess) {
    return cuda_detail::cuda_error(err, "uploading the KV-Compress jobs");
  }
  args_.jobs = jobs_.as<cuda::KvCompressJob>();
  args_.row_stats = row_stats_.as<float>();
  args_.scores = scores_.as<float>();
  args_.kept = kept_.as<std::int32_t>();
  return true;
}

void CudaKvCompress::compress_layer(const float* q, std::size_t q_stride, float scale,
                                    const cuda::FlatBatchView& batch, const cuda::PagedKvView& kv,
                                    cudaStream_t stream) {
  if (!active()) return;
  args_.q = q;
  args_.q_stride = q_stride;
  args_.scale = scale;
  cuda::kv_compress_scores(args_, batch, kv, stream);
  cuda::kv_compress_select(args_, kv, stream);
  cuda::kv_compress_compact(args_, batch, kv, stream);
}

}  // namespace weft::model
