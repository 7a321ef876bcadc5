#include "runtime/parallel/mpi_communicator.hpp"

#include <cstring>
#include <limits>
#include <vector>

#if WEFT_HAVE_MPI
// The C API only: Open MPI's deprecated C++ bindings warn under -Wextra.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include "kernels/cpu/vector_math.hpp"
#endif

namespace weft::parallel {

#if WEFT_HAVE_MPI
namespace {

Error mpi_error(const char* call, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return Error(ErrorCode::kIo, std::string("mpi ") + call + ": " + std::string(text, length));
}

// MPI has no bf16 type: sum 16-bit words as bf16 values, rounding each partial sum.
void sum_bf16(void* in, void* inout, int* count, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *count; ++i) {
    b[i] = cpu::f32_to_bf16(cpu::bf16_to_f32(a[i]) + cpu::bf16_to_f32(b[i]));
  }
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(bool owns_mpi, int rank, int size, MPI_Op bf16_sum)
      : owns_mpi_(owns_mpi), rank_(rank), size_(size), bf16_sum_(bf16_sum) {}
  ~MpiCommunicator() override {
    MPI_Op_free(&bf16_sum_);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_mpi_ && !finalized) MPI_Finalize();
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  std::string name() const override { return "mpi"; }

  Result<void> all_reduce_sum(std::span<float> data) override {
    if (auto ok = check_count("all_reduce_sum", data.size()); !ok) return ok;
    const int rc = MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()),
                                 MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return mpi_error("MPI_Allreduce", rc);
    return {};
  }
  Result<void> all_reduce_sum_bf16(std::span<std::uint16_t> data) override {
    if (auto ok = check_count("all_reduce_sum_bf16", data.size()); !ok) return ok;
    const int rc = MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()),
                                 MPI_UINT16_T, bf16_sum_, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return mpi_error("MPI_Allreduce (bf16)", rc);
    return {};
  }
  Result<void> all_gather(std::span<const float> mine, std::span<float> all) override {
    if (auto ok = check_gather_sizes(*this, mine.size(), all.size()); !ok) return ok;
    if (auto ok = check_count("all_gather", all.size()); !ok) return ok;
    const int rc = MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_FLOAT, all.data(),
                                 static_cast<int>(mine.size()), MPI_FLOAT, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return mpi_error("MPI_Allgather", rc);
    return {};
  }
  Result<void> broadcast(std::span<std::byte> data, int root) override {
    if (auto ok = check_root(*this, root); !ok) return ok;
    if (auto ok = check_count("broadcast", data.size()); !ok) return ok;
    const int rc =
        MPI_Bcast(data.data(), static_cast<int>(data.size()), MPI_BYTE, root, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return mpi_error("MPI_Bcast", rc);
    return {};
  }
  Result<void> barrier() override {
    const int rc = MPI_Barrier(MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return mpi_error("MPI_Barrier", rc);
    return {};
  }

 private:
  // MPI counts are int; a step's activations are far below 2^31 values, a bug is not.
  static Result<void> check_count(const char* call, std::size_t n) {
    if (n > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      return Error(ErrorCode::kInvalidArgument,
                   std::string("mpi ") + call + ": " + std::to_string(n) +
                       " values exceed MPI's int count; split the buffer");
    }
    return {};
  }

  bool owns_mpi_;
  int rank_, size_;
  MPI_Op bf16_sum_;
};

}  // namespace

bool mpi_built() noexcept {
  return true;
}

Result<std::unique_ptr<Communicator>> mpi_world() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  bool owns = false;
  if (!initialized) {
    int provided = 0;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) return mpi_error("MPI_Init_thread", rc);
    if (provided < MPI_THREAD_SERIALIZED) {
      MPI_Finalize();
      return Error(ErrorCode::kUnsupported,
                   "mpi: the MPI library does not support MPI_THREAD_SERIALIZED (the executor "
                   "thread calls MPI, not the thread that started it)");
    }
    owns = true;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Op bf16_sum = MPI_OP_NULL;
  MPI_Op_create(&sum_bf16, /*commute=*/1, &bf16_sum);
  return std::unique_ptr<Communicator>(
      std::make_unique<MpiCommunicator>(owns, rank, size, bf16_sum));
}

void mpi_abort_world(int exit_code) noexcept {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
}

#else

bool mpi_built() noexcept {
  return false;
}

Result<std::unique_ptr<Communicator>> mpi_world() {
  return Error(ErrorCode::kUnsupported,
               "this Weft was built without MPI: install libopenmpi-dev (scripts/setup) and "
               "reconfigure (WEFT_MPI=AUTO or ON)");
}

void mpi_abort_world(int) noexcept {}

#endif

}  // namespace weft::parallel
