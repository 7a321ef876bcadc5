#pragma once
// Asks the L2 cache to fetch a range of device memory: the next matrix product's weights,
// launched on a second stream beside a decode step's latency-bound small kernels, so memory
// that would sit idle while they run streams weights the product then finds in L2. A hint:
// nothing is written and no result changes.

#include <cuda_runtime_api.h>

#include <cstddef>

namespace weft::cuda {

// Bulk L2 prefetches (Hopper's cp.async.bulk.prefetch, 16 KB each) of [data, data + bytes)
// spread over many blocks, so no single multiprocessor's copy engine limits the rate; a no-op
// on devices before compute capability 9 and for a null range. data 16-byte aligned.
void l2_prefetch(const void* data, std::size_t bytes, cudaStream_t stream);

}  // namespace weft::cuda
