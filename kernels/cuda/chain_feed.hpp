#pragma once
// A greedy chain's token feed (runtime/model/cuda/cuda_draft_chain.cpp): the next step's token
// ids taken from the previous step's sampling results on the device, so the host need not wait
// between the steps.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace weft::cuda {

// dst[i] = the int32 at src + i * pitch bytes, for i < n; an id outside [0, vocab) (a row the
// sampler could not pick from) becomes 0, so the step that reads it stays in bounds (its
// output is then discarded by the host).
void chain_feed(const void* src, std::size_t pitch, std::int32_t* dst, int n, int vocab,
                cudaStream_t stream);

}  // namespace weft::cuda
