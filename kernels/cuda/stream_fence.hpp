#pragma once
// A kernel that does nothing, launched the ordinary way (without programmatic dependent
// launch): it starts only once every kernel before it on the stream has finished and its
// writes are visible, so a kernel launched after it with programmatic dependent launch that
// does not wait inside (NCCL's symmetric collectives before 2.30.7) still reads finished
// inputs. One block of one thread: about a microsecond inside a CUDA graph.

#include <cuda_runtime_api.h>

namespace weft::cuda {

void stream_fence(cudaStream_t stream);

}  // namespace weft::cuda
