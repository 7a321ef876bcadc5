#include "runtime/parallel/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>

namespace weft::parallel {
namespace {

Error nccl_error(const char* call, ncclResult_t rc) {
  return Error(ErrorCode::kIo, std::string("nccl ") + call + ": " + ncclGetErrorString(rc));
}
Error cuda_error(const char* call, cudaError_t rc) {
  return Error(ErrorCode::kIo, std::string("cuda ") + call + ": " + cudaGetErrorString(rc));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Communicator& bootstrap, ncclComm_t comm, int device, cudaStream_t stream)
      : bootstrap_(bootstrap), comm_(comm), device_(device), stream_(stream) {}
  ~NcclCommunicator() override { ncclCommDestroy(comm_); }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const noexcept override { return bootstrap_.rank(); }
  int size() const noexcept override { return bootstrap_.size(); }
  std::string name() const override { return "nccl"; }
  bool device_buffers() const noexcept override { return true; }

  Result<void> all_reduce_sum(std::span<float> data) override {
    const auto rc =
        ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat32, ncclSum, comm_, stream_);
    if (rc != ncclSuccess) return nccl_error("ncclAllReduce", rc);
    return {};
  }
  Result<void> all_reduce_sum_bf16(std::span<std::uint16_t> data) override {
    const auto rc =
        ncclAllReduce(data.data(), data.data(), data.size(), ncclBfloat16, ncclSum, comm_, stream_);
    if (rc != ncclSuccess) return nccl_error("ncclAllReduce (bf16)", rc);
    return {};
  }
  Result<void> all_gather(std::span<const float> mine, std::span<float> all) override {
    if (auto ok = check_gather_sizes(*this, mine.size(), all.size()); !ok) return ok;
    const auto rc =
        ncclAllGather(mine.data(), all.data(), mine.size(), ncclFloat32, comm_, stream_);
    if (rc != ncclSuccess) return nccl_error("ncclAllGather", rc);
    return {};
  }
  Result<void> broadcast(std::span<std::byte> data, int root) override {
    if (auto ok = check_root(*this, root); !ok) return ok;
    const auto rc =
        ncclBroadcast(data.data(), data.data(), data.size(), ncclUint8, root, comm_, stream_);
    if (rc != ncclSuccess) return nccl_error("ncclBroadcast", rc);
    return {};
  }
  Result<void> barrier() override {
    if (auto rc = cudaSetDevice(device_); rc != cudaSuccess) return cuda_error("cudaSetDevice", rc);
    if (auto rc = cudaStreamSynchronize(stream_); rc != cudaSuccess) {
      return cuda_error("cudaStreamSynchronize", rc);
    }
    return bootstrap_.barrier();
  }

 private:
  Communicator& bootstrap_;
  ncclComm_t comm_;
  int device_;
  cudaStream_t stream_;
};

}  // namespace

Result<std::unique_ptr<Communicator>> make_nccl_communicator(Communicator& bootstrap,
                                                             int cuda_device, void* cuda_stream) {
  if (bootstrap.device_buffers()) {
    return Error(
        ErrorCode::kInvalidArgument,
        "nccl: the bootstrap communicator must use host buffers (MPI), not " + bootstrap.name());
  }
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (bootstrap.rank() == 0) {
    if (auto rc = ncclGetUniqueId(&id); rc != ncclSuccess) {
      return nccl_error("ncclGetUniqueId", rc);
    }
  }
  auto sent = bootstrap.broadcast(
      std::span<std::byte>(reinterpret_cast<std::byte*>(&id), sizeof id), /*root=*/0);
  if (!sent) return sent.error();
  if (auto rc = cudaSetDevice(cuda_device); rc != cudaSuccess) {
    return cuda_error("cudaSetDevice", rc);
  }
  ncclComm_t comm = nullptr;
  if (auto rc = ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank());
      rc != ncclSuccess) {
    return nccl_error("ncclCommInitRank", rc);
  }
  return std::unique_ptr<Communicator>(std::make_unique<NcclCommunicator>(
      bootstrap, comm, cuda_device, static_cast<cudaStream_t>(cuda_stream)));
}

}  // namespace weft::parallel
