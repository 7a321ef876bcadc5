#pragma once
// Owning handles for device memory and pinned host memory. Host code only (no kernels).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

namespace weft::model::cuda_detail {

// Bytes from one CUDA allocator, freed on destruction. Growing reallocates without keeping
// contents. `Memory` names the allocator: see DeviceMemory and PinnedMemory below.
template <class Memory>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  ~CudaBuffer() { reset(); }
  CudaBuffer(CudaBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)),
        bytes_(std::exchange(o.bytes_, 0)),
        owned_(std::exchange(o.owned_, true)) {}
  CudaBuffer& operator=(CudaBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      owned_ = std::exchange(o.owned_, true);
    }
    return *this;
  }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;

  // Makes the buffer hold at least `bytes`; reallocates (dropping contents) when smaller.
  cudaError_t reserve(std::size_t bytes) {
    if (bytes <= bytes_ && ptr_ != nullptr) return cudaSuccess;
    reset();
    const cudaError_t err = Memory::allocate(&ptr_, bytes == 0 ? 1 : bytes);
    if (err != cudaSuccess) {
      ptr_ = nullptr;
      return err;
    }
    bytes_ = bytes;
    return cudaSuccess;
  }
  void reset() {
    if (ptr_ != nullptr && owned_) Memory::release(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
    owned_ = true;
  }
  // Holds `bytes` at `ptr`, memory owned elsewhere that outlives this buffer (a tensor-parallel
  // group's collective memory), instead of its own; reserve() beyond `bytes` allocates its own
  // again.
  void adopt(void* ptr, std::size_t bytes) {
    reset();
    ptr_ = ptr;
    bytes_ = bytes;
    owned_ = false;
  }
  bool owned() const noexcept { return owned_; }

  void* get() const noexcept { return ptr_; }
  template <class T>
  T* as() const noexcept {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  bool owned_ = true;
};

// cudaMalloc'd device memory.
struct DeviceMemory {
  static cudaError_t allocate(void** ptr, std::size_t bytes) { return cudaMalloc(ptr, bytes); }
  static void release(void* ptr) { cudaFree(ptr); }
};

// cudaHostAlloc'd (pinned) host memory, so copies to and from the device are asynchronous.
struct PinnedMemory {
  static cudaError_t allocate(void** ptr, std::size_t bytes) {
    return cudaHostAlloc(ptr, bytes, cudaHostAllocDefault);
  }
  static void release(void* ptr) { cudaFreeHost(ptr); }
};

using DeviceBuffer = CudaBuffer<DeviceMemory>;
using PinnedBuffer = CudaBuffer<PinnedMemory>;

}  // namespace weft::model::cuda_detail
