#pragma once
// Token embedding lookup over the flat batch: the first operation of a step.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/precision.hpp"

namespace weft::cuda {

// out[t, :] = (float) table[tokens[t], :] for t < num_tokens. table is [vocab, hidden] in the
// model's precision; out is the fp32 residual stream. Token ids are checked on the host.
void embedding_gather(const void* table, Precision precision, const std::int32_t* tokens,
                      int num_tokens, int hidden, float* out, cudaStream_t stream);

}  // namespace weft::cuda
