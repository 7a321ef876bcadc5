#pragma once
// The NCCL backend of Communicator: device buffers, collectives enqueued on a CUDA stream
// (ncclAllReduce, ncclAllGather, ncclBroadcast). One process per GPU; the NCCL unique id
// that joins them is made by rank 0 and broadcast over a host communicator (MPI), so the
// group works across hosts wherever mpirun does. Built when CUDA, NCCL and MPI are found.

#include <memory>
#include <string>

#include "runtime/parallel/communicator.hpp"
#include "weft/error.hpp"

namespace weft::parallel {

// `bootstrap` (an MPI world) carries the unique id and must outlive the result; this rank
// joins as bootstrap.rank() of bootstrap.size(). `cuda_stream` (a cudaStream_t, or null for
// the default stream) orders the collectives: calls return once they are enqueued, and
// barrier() waits for the stream and then for every rank.
Result<std::unique_ptr<Communicator>> make_nccl_communicator(Communicator& bootstrap,
                                                             int cuda_device, void* cuda_stream);

// Whether this process can open NCCL (a local check, no communication); `why` gets the reason
// when it cannot.
bool nccl_available(std::string* why = nullptr);

}  // namespace weft::parallel
