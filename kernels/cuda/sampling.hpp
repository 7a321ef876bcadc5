#pragma once
// The sampler's passes over whole rows of logits, on the device (see
// runtime/sampling/device_sampling.hpp for what is computed and what the host finishes). One
// block per row, so a row's result depends on that row alone: sampling on the GPU keeps a
// request's tokens independent of the batch it runs in.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/sampling/device_sampling.hpp"

namespace weft::cuda {

struct SampleArgs {
  // [rows of the step, vocab]; the bitmask is applied in place, so two sampled rows naming the
  // same logits row must have the same bitmask (the engine samples each row once).
  float* logits = nullptr;
  float* work = nullptr;  // one row of `vocab` floats per sampled row (scratch)
  int vocab = 0;
  const sampling::DeviceSampleRow* rows = nullptr;  // [num_rows]
  int num_rows = 0;
  const sampling::DeviceSampleEdit* edits = nullptr;
  const std::uint32_t* masks = nullptr;             // bitmask words, indexed by mask_word_offset
  sampling::DeviceSampleResult* results = nullptr;  // [num_rows]
  sampling::DeviceCandidate* candidates = nullptr;  // the pool, [candidate_capacity]
  int candidate_capacity = 0;
  unsigned* candidates_used = nullptr;       // zeroed before the launch
  sampling::DeviceCandidate* top = nullptr;  // [num_rows, kDeviceTopEntries]
};

void sample_rows(const SampleArgs& args, cudaStream_t stream);

}  // namespace weft::cuda
