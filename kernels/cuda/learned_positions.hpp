#pragma once
// What follows the token embedding gather in some families: a scale (Gemma multiplies by
// sqrt(hidden)) and learned absolute positions (GPT-2's wpe; OPT's table, offset by 2).

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/precision.hpp"

namespace weft::cuda {

// x[t, :] = x[t, :] * scale + table[positions[t] + offset, :] for t < num_tokens. x is the fp32
// residual stream; table ([rows, hidden] in `precision`) may be null (scale only). Positions
// are checked on the host against the table's rows.
void scale_add_positions(float* x, int num_tokens, int hidden, float scale, const void* table,
                         Precision precision, const std::int32_t* positions, int offset,
                         cudaStream_t stream);

}  // namespace weft::cuda
