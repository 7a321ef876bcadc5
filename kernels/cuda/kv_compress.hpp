#pragma once
// KV-Compress on the GPU (runtime/kv/kv_compress.hpp has the policy; kernels/cpu/kv_compress.hpp
// the CPU kernels, whose definitions these follow): after a step's attention in one layer, the
// last queries of each compressing sequence score that layer's cached slots, each kv head
// chooses its survivors, and they move to the first slots of the sequence's pages.
//
// 1. Scores: scores[kv_head * slots + j] = the sum, over the job's window queries and the query
//    heads of kv_head's group, of the softmax weight that query paid slot j (window query w sits
//    at slot slots - queries + w and attends causally to slots [0, its own]). Two passes, both in
//    a fixed order (no atomics, so a run repeats bitwise): each (query, head) row's max and sum
//    of exponentials, then each slot's weights, recomputing the dot products.
// 2. Choice: per (job, kv head), the last `protect` slots and, of the others, the
//    slots - protect - evict with the highest scores (a tie keeps the earlier slot), ascending:
//    exactly kv::select_kept_slots given the same scores. A radix select finds the threshold
//    score, then one ordered pass keeps every score above it and the earliest ones equal to it.
// 3. Compaction: each kv head's kept rows (K and V, with their row scales for int8/fp8 pages)
//    move in order to slots 0..kept-1, as cpu::compact_kv_head. Rows move in chunks, a chunk's
//    sources all read before any of its destinations is written (kept[i] >= i, so no later
//    chunk's source is overwritten).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/paged_kv.hpp"

namespace weft::cuda {

// One compressing sequence of the step.
struct KvCompressJob {
  std::int32_t seq = 0;          // its index in the FlatBatchView's page tables
  std::int32_t first_query = 0;  // the q row of its first window query
  std::int32_t queries = 0;      // window queries: min(compress_window, its tokens in the step)
  std::int32_t slots = 0;        // slots it holds after the step
  std::int32_t evict = 0;        // slots each kv head evicts
  std::int32_t protect = 0;      // compress_window: the last slots, never evicted
  std::int32_t offset = 0;       // its [num_kv_heads][slots] block in scores and kept
  std::int32_t unused = 0;
};

struct KvCompressArgs {
  const float* q = nullptr;  // token t's head h at q + t * q_stride + h * head_dim (rotated)
  std::size_t q_stride = 0;
  int num_heads = 0;
  float scale = 1.0f;
  const KvCompressJob* jobs = nullptr;  // [num_jobs] on the device
  int num_jobs = 0;
  int max_queries = 0;           // over the jobs
  int max_slots = 0;             // over the jobs
  float* row_stats = nullptr;    // [num_jobs][max_queries][num_heads][2]
  float* scores = nullptr;       // each job's [num_kv_heads][slots] at its offset
  std::int32_t* kept = nullptr;  // each job's [num_kv_heads][slots] at its offset (kept first)
};

// Floats of row_stats for these jobs.
inline std::size_t kv_compress_row_stat_floats(int num_jobs, int max_queries, int num_heads) {
  return static_cast<std::size_t>(num_jobs) * max_queries * num_heads * 2;
}

// Steps 1 and 2: fills scores and, per (job, kv head), kept[0 .. slots - evict) with the kept
// slots in ascending order. kv.layer_offset selects the layer.
void kv_compress_scores(const KvCompressArgs& args, const FlatBatchView& batch,
                        const PagedKvView& kv, cudaStream_t stream);
void kv_compress_select(const KvCompressArgs& args, const PagedKvView& kv, cudaStream_t stream);

// Step 3: moves each (job, kv head)'s kept rows to the front of its pages in kv's layer.
void kv_compress_compact(const KvCompressArgs& args, const FlatBatchView& batch,
                         const PagedKvView& kv, cudaStream_t stream);

}  // namespace weft::cuda
