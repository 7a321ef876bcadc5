#include "runtime/parallel/mpi_communicator.hpp"

#include <cstring>
#include <limits>
#include <list>
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
  // `comm` is MPI_COMM_WORLD (owns_mpi: this object finalizes MPI) or a split of it, which
  // must be destroyed before the world's communicator.
  MpiCommunicator(bool owns_mpi, MPI_Comm comm, MPI_Op bf16_sum)
      : owns_mpi_(owns_mpi), comm_(comm), bf16_sum_(bf16_sum) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    (void)wait_sends();
    MPI_Op_free(&bf16_sum_);
    if (comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
    if (owns_mpi_) MPI_Finalize();
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  std::string name() const override { return "mpi"; }

  Result<void> all_reduce_sum(std::span<float> data) override {
    if (auto ok = check_count("all_reduce_sum", data.size()); !ok) return ok;
    const int rc = MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()),
                                 MPI_FLOAT, MPI_SUM, comm_);
    if (rc != MPI_SUCCESS) return mpi_error("MPI_Allreduce", rc);
    return {};
  }
  Result<void> all_reduce_sum_bf16(std::span<std::uint16_t> data) override {
    if (auto ok = check_count("all_reduce_sum_bf16", data.size()); !ok) return ok;
    const int rc = MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()),
                                 MPI_UINT16_T, bf16_sum_, comm_);
    if (rc != MPI_SUCCESS) return mpi_error("MPI_Allreduce (bf16)", rc);
    return {};
  }
  Result<void> all_gather(std::span<const float> mine, std::span<float> all) override {
    if (auto ok = check_gather_sizes(*this, mine.size(), all.size()); !ok) return ok;
    if (auto ok = check_count("all_gather", all.size()); !ok) return ok;
    const int rc = MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_FLOAT, all.data(),
                                 static_cast<int>(mine.size()), MPI_FLOAT, comm_);
    if (rc != MPI_SUCCESS) return mpi_error("MPI_Allgather", rc);
    return {};
  }
  Result<void> broadcast(std::span<std::byte> data, int root) override {
    if (auto ok = check_root(*this, root); !ok) return ok;
    if (auto ok = check_count("broadcast", data.size()); !ok) return ok;
    const int rc = MPI_Bcast(data.data(), static_cast<int>(data.size()), MPI_BYTE, root, comm_);
    if (rc != MPI_SUCCESS) return mpi_error("MPI_Bcast", rc);
    return {};
  }
  Result<void> barrier() override {
    const int rc = MPI_Barrier(comm_);
    if (rc != MPI_SUCCESS) return mpi_error("MPI_Barrier", rc);
    return {};
  }
  Result<void> send(std::span<const std::byte> data, int dest) override {
    if (auto ok = check_peer(*this, "send", dest); !ok) return ok;
    if (auto ok = check_count("send", data.size()); !ok) return ok;
    if (auto ok = reap_sends(); !ok) return ok;
    // A copy travels, so the caller's buffer is free at once and the sender goes on with its
    // next micro-batch while this one is delivered.
    Pending& p = pending_.emplace_back();
    p.bytes.assign(data.begin(), data.end());
    const int rc = MPI_Isend(p.bytes.data(), static_cast<int>(p.bytes.size()), MPI_BYTE, dest,
                             kPointToPointTag, comm_, &p.request);
    if (rc != MPI_SUCCESS) {
      pending_.pop_back();
      return mpi_error("MPI_Isend", rc);
    }
    return {};
  }
  Result<void> recv(std::span<std::byte> data, int source) override {
    if (auto ok = check_peer(*this, "recv", source); !ok) return ok;
    if (auto ok = check_count("recv", data.size()); !ok) return ok;
    MPI_Status status;
    const int rc = MPI_Recv(data.data(), static_cast<int>(data.size()), MPI_BYTE, source,
                            kPointToPointTag, comm_, &status);
    if (rc != MPI_SUCCESS) return mpi_error("MPI_Recv", rc);
    int got = 0;
    MPI_Get_count(&status, MPI_BYTE, &got);
    if (static_cast<std::size_t>(got) != data.size()) {
      return Error(ErrorCode::kInternal, "mpi recv: rank " + std::to_string(source) + " sent " +
                                             std::to_string(got) + " bytes, expected " +
                                             std::to_string(data.size()));
    }
    return {};
  }
  Result<void> wait_sends() override {
    for (auto& p : pending_) {
      const int rc = MPI_Wait(&p.request, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return mpi_error("MPI_Wait", rc);
    }
    pending_.clear();
    return {};
  }
  Result<std::unique_ptr<Communicator>> split(int color, int key) override {
    MPI_Comm part = MPI_COMM_NULL;
    const int rc = MPI_Comm_split(comm_, color, key, &part);
    if (rc != MPI_SUCCESS) return mpi_error("MPI_Comm_split", rc);
    MPI_Comm_set_errhandler(part, MPI_ERRORS_RETURN);
    MPI_Op bf16_sum = MPI_OP_NULL;
    MPI_Op_create(&sum_bf16, /*commute=*/1, &bf16_sum);
    return std::unique_ptr<Communicator>(
        std::make_unique<MpiCommunicator>(/*owns_mpi=*/false, part, bf16_sum));
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

  // Frees the copies of sends already delivered.
  Result<void> reap_sends() {
    while (!pending_.empty()) {
      int done = 0;
      const int rc = MPI_Test(&pending_.front().request, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return mpi_error("MPI_Test", rc);
      if (!done) break;
      pending_.pop_front();
    }
    return {};
  }

  // Point-to-point messages use their own tag, apart from anything else on the communicator.
  static constexpr int kPointToPointTag = 17;
  struct Pending {
    std::vector<std::byte> bytes;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  bool owns_mpi_;
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  MPI_Op bf16_sum_;
  std::list<Pending> pending_;  // a list: an Isend's buffer must not move
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
  MPI_Op bf16_sum = MPI_OP_NULL;
  MPI_Op_create(&sum_bf16, /*commute=*/1, &bf16_sum);
  return std::unique_ptr<Communicator>(
      std::make_unique<MpiCommunicator>(owns, MPI_COMM_WORLD, bf16_sum));
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
