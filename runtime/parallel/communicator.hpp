#pragma once
// A group of processes (one per device) that reduce, gather and broadcast together: the
// collectives tensor parallelism needs (docs/parallel.md). Backends: LocalCommunicator (one
// process, nothing to exchange), MpiCommunicator (host buffers, MPI_Allreduce and friends,
// runtime/parallel/mpi_communicator.hpp) and NcclCommunicator (device buffers on a CUDA
// stream, runtime/parallel/nccl_communicator.hpp). The executor of a device owns one.
//
// Every member of the group must make the same calls in the same order with the same sizes;
// a collective returns once this rank's part is done (NCCL: once it is enqueued on the
// communicator's stream). Buffers are host memory unless device_buffers() says otherwise.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weft/error.hpp"

namespace weft::parallel {

// What device memory a group's collectives run on (Communicator::collective_memory).
enum class CollectiveMemoryKind {
  kPlain,       // the caller's own memory (cudaMalloc): nothing asked of the backend
  kRegistered,  // NCCL user buffer registration (ncclMemAlloc + ncclCommRegister)
  kSymmetric,   // an NCCL symmetric window (ncclMemAlloc + ncclCommWindowRegister)
};

// Memory made by Communicator::collective_memory: valid until the communicator is destroyed.
struct CollectiveMemory {
  void* data = nullptr;
  std::size_t bytes = 0;  // at least what was asked (rounded up to the allocation granularity)
  CollectiveMemoryKind kind = CollectiveMemoryKind::kPlain;
  // The collectives on this memory may start before the kernel that wrote their input has
  // finished and flushed (NCCL's symmetric kernels are launched with programmatic dependent
  // launch, and releases before 2.30.7 do not wait inside them): enqueue a kernel without
  // that attribute (cuda::stream_fence) between the writer and each collective.
  bool fence_before_collectives = false;
  std::string description;  // for logs: how it was made, and by which library version
};

// Memory that this group's own kernels read across the GPUs (NCCL's device API, 2.28): a
// symmetric window every rank's kernels load from and store to, and `barriers` cross-GPU
// barriers, with the device communicator that names them (Communicator::device_window).
// Fields are opaque here; kernels/cuda/tp_fused.hpp's TpFusedGroup takes them as they are.
struct DeviceWindow {
  void* data = nullptr;              // this rank's part of the window (device memory)
  std::size_t bytes = 0;             // of each rank's part
  void* window = nullptr;            // ncclWindow_t
  const void* dev_comm = nullptr;    // ncclDevComm (host memory, valid while the group lives)
  std::uint32_t barrier_buffer = 0;  // ncclLsaBarrierHandle: resource buffer, barrier count
  int barriers = 0;
  std::string description;  // for logs: how it was made, and by which library version
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  // The backend's name for messages: "local", "mpi", "nccl".
  virtual std::string name() const = 0;
  // True when buffers must be device memory of the communicator's GPU (NCCL).
  virtual bool device_buffers() const noexcept { return false; }

  // data[i] = the sum over ranks of data[i], on every rank.
  virtual Result<void> all_reduce_sum(std::span<float> data) = 0;
  // The same over bf16 values held as their 16 bits (DType::kBF16's layout); each partial
  // sum is rounded to bf16, as NCCL's bf16 reduction does.
  virtual Result<void> all_reduce_sum_bf16(std::span<std::uint16_t> data) = 0;
  // all = rank 0's mine, then rank 1's, ...; all.size() must be size() * mine.size().
  virtual Result<void> all_gather(std::span<const float> mine, std::span<float> all) = 0;
  // root's bytes to every rank.
  virtual Result<void> broadcast(std::span<std::byte> data, int root) = 0;
  virtual Result<void> barrier() = 0;

  // Point to point (pipeline parallelism: a stage's activations to the next stage). send()
  // returns once `data` may be reused (MPI copies it and sends without blocking; NCCL enqueues
  // on the stream, so the buffer must hold until the stream passes the send); recv() returns
  // once `data` holds the message (NCCL: once the receive is enqueued). Messages from one
  // rank to another arrive in the order sent, and a recv's size must equal the send's.
  virtual Result<void> send(std::span<const std::byte> data, int dest) = 0;
  virtual Result<void> recv(std::span<std::byte> data, int source) = 0;
  // Waits until every send() of this rank has been delivered (MPI) or has left the stream
  // (NCCL).
  virtual Result<void> wait_sends() { return {}; }

  // The members of this group with the same `color`, ordered by `key` (MPI_Comm_split): the
  // tensor-parallel group of one pipeline stage. Collective over the whole group.
  virtual Result<std::unique_ptr<Communicator>> split(int color, int key) = 0;

  // `bytes` of device memory on which this group's collectives run faster, of `kind`
  // (docs/parallel.md, "NCCL buffers"). Collective: every member asks for the same bytes and
  // kind in the same order. All members succeed or all fail alike (the backend agrees before
  // returning), so a caller that falls back to its own memory on error stays in step with
  // the others. Backends without such memory (host buffers) answer kUnsupported.
  virtual Result<CollectiveMemory> collective_memory(std::size_t bytes, CollectiveMemoryKind kind) {
    (void)bytes;
    (void)kind;
    return Error(ErrorCode::kUnsupported, name() + " has no collective memory");
  }

  // `bytes` of window memory per rank and `barriers` barriers for kernels that exchange data
  // themselves (the fused all-reduce and norm, kernels/cuda/tp_fused.hpp). Collective, and
  // all members succeed or fail alike, as collective_memory; kUnsupported (with the reason)
  // where the backend or its library version has no device API.
  virtual Result<DeviceWindow> device_window(std::size_t bytes, int barriers) {
    (void)bytes;
    (void)barriers;
    return Error(ErrorCode::kUnsupported, name() + " has no device API");
  }
};

// "plain", "registered", "symmetric"; parse_collective_memory_kind reads them back (the value
// of WEFT_TP_NCCL_BUFFERS; empty means plain), naming the accepted values in its error.
inline const char* collective_memory_kind_name(CollectiveMemoryKind kind) noexcept {
  switch (kind) {
    case CollectiveMemoryKind::kRegistered:
      return "registered";
    case CollectiveMemoryKind::kSymmetric:
      return "symmetric";
    case CollectiveMemoryKind::kPlain:
      break;
  }
  return "plain";
}
inline Result<CollectiveMemoryKind> parse_collective_memory_kind(std::string_view text) {
  for (auto kind : {CollectiveMemoryKind::kPlain, CollectiveMemoryKind::kRegistered,
                    CollectiveMemoryKind::kSymmetric}) {
    if (text == collective_memory_kind_name(kind)) return kind;
  }
  if (text.empty()) return CollectiveMemoryKind::kPlain;
  return Error(ErrorCode::kInvalidArgument, "WEFT_TP_NCCL_BUFFERS: '" + std::string(text) +
                                                "' is not one of plain, registered, symmetric");
}

// The checks every backend makes before a collective; the error names the call.
inline Result<void> check_gather_sizes(const Communicator& comm, std::size_t mine,
                                       std::size_t all) {
  if (all != mine * static_cast<std::size_t>(comm.size())) {
    return Error(ErrorCode::kInvalidArgument, comm.name() + " all_gather: the output holds " +
                                                  std::to_string(all) + " values, expected " +
                                                  std::to_string(comm.size()) + " ranks x " +
                                                  std::to_string(mine));
  }
  return {};
}
inline Result<void> check_root(const Communicator& comm, int root) {
  if (root < 0 || root >= comm.size()) {
    return Error(ErrorCode::kInvalidArgument, comm.name() + " broadcast: root " +
                                                  std::to_string(root) + " is not in [0, " +
                                                  std::to_string(comm.size()) + ")");
  }
  return {};
}

inline Result<void> check_peer(const Communicator& comm, const char* call, int peer) {
  if (peer < 0 || peer >= comm.size()) {
    return Error(ErrorCode::kInvalidArgument, comm.name() + " " + call + ": rank " +
                                                  std::to_string(peer) + " is not in [0, " +
                                                  std::to_string(comm.size()) + ")");
  }
  return {};
}

// A group of one: reductions and broadcasts leave the data as it is; a send to itself is
// queued until the matching recv (in order, sizes checked).
class LocalCommunicator final : public Communicator {
 public:
  int rank() const noexcept override { return 0; }
  int size() const noexcept override { return 1; }
  std::string name() const override { return "local"; }
  Result<void> all_reduce_sum(std::span<float>) override { return {}; }
  Result<void> all_reduce_sum_bf16(std::span<std::uint16_t>) override { return {}; }
  Result<void> all_gather(std::span<const float> mine, std::span<float> all) override {
    if (auto ok = check_gather_sizes(*this, mine.size(), all.size()); !ok) return ok;
    if (!mine.empty()) std::memmove(all.data(), mine.data(), mine.size_bytes());
    return {};
  }
  Result<void> broadcast(std::span<std::byte>, int root) override {
    return check_root(*this, root);
  }
  Result<void> barrier() override { return {}; }
  Result<void> send(std::span<const std::byte> data, int dest) override {
    if (auto ok = check_peer(*this, "send", dest); !ok) return ok;
    queued_.emplace_back(data.begin(), data.end());
    return {};
  }
  Result<void> recv(std::span<std::byte> data, int source) override {
    if (auto ok = check_peer(*this, "recv", source); !ok) return ok;
    if (queued_.empty()) {
      return Error(ErrorCode::kInvalidArgument,
                   "local recv: nothing was sent (a group of one would wait forever)");
    }
    if (queued_.front().size() != data.size()) {
      return Error(ErrorCode::kInvalidArgument,
                   "local recv: the message holds " + std::to_string(queued_.front().size()) +
                       " bytes, expected " + std::to_string(data.size()));
    }
    if (!data.empty()) std::memcpy(data.data(), queued_.front().data(), data.size());
    queued_.pop_front();
    return {};
  }
  Result<std::unique_ptr<Communicator>> split(int, int) override {
    return std::unique_ptr<Communicator>(std::make_unique<LocalCommunicator>());
  }

 private:
  std::deque<std::vector<std::byte>> queued_;
};

}  // namespace weft::parallel
