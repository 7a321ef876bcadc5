#pragma once
// The MPI backend of Communicator: host buffers, MPI_Allreduce, MPI_Allgather, MPI_Bcast and
// MPI_Barrier over MPI_COMM_WORLD. Processes are started by `mpirun -np N` (Open MPI from
// Debian), on one host or several. Built when CMake finds MPI (WEFT_MPI=AUTO); otherwise
// mpi_world() says so.

#include <memory>

#include "runtime/parallel/communicator.hpp"
#include "weft/error.hpp"

namespace weft::parallel {

// True when this Weft was built with MPI.
bool mpi_built() noexcept;

// The world communicator. The first call initializes MPI (thread level SERIALIZED: one
// thread at a time calls into it, the executor's); the returned object finalizes MPI when
// it is destroyed, so keep it alive until the last collective. MPI errors are returned as
// Errors instead of aborting. Without MPI built in, an kUnsupported error.
Result<std::unique_ptr<Communicator>> mpi_world();

// Ends every process of the world at once (MPI_Abort): for an error on one rank that would
// leave the others waiting in a collective. Without MPI, or before mpi_world(), returns.
void mpi_abort_world(int exit_code) noexcept;

}  // namespace weft::parallel
