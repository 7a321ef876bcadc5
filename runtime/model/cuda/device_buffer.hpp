#pragma once
// Owning handles for device memory and pinned host memory. Host code only (no kernels).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

namespace weft::model::cuda_detail {

// cudaMalloc'd bytes, freed on destruction. Growing reallocates without keeping contents.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Makes the buffer hold at least `bytes`; reallocates (dropping contents) when smaller.
  cudaError_t reserve(std::size_t bytes) {
    if (bytes <= bytes_ && ptr_ != nullptr) return cudaSuccess;
    reset();
    const cudaError_t err = cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes);
    if (err != cudaSuccess) {
      ptr_ = nullptr;
      return err;
    }
    bytes_ = bytes;
    return cudaSuccess;
  }
  void reset() {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }

  void* get() const noexcept { return ptr_; }
  template <class T>
  T* as() const noexcept {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// cudaHostAlloc'd (pinned) bytes, so copies to and from the device are asynchronous.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { reset(); }
  PinnedBuffer(PinnedBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  cudaError_t reserve(std::size_t bytes) {
    if (bytes <= bytes_ && ptr_ != nullptr) return cudaSuccess;
    reset();
    const cudaError_t err = cudaHostAlloc(&ptr_, bytes == 0 ? 1 : bytes, cudaHostAllocDefault);
    if (err != cudaSuccess) {
      ptr_ = nullptr;
      return err;
    }
    bytes_ = bytes;
    return cudaSuccess;
  }
  void reset() {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }

  template <class T>
  T* as() const noexcept {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace weft::model::cuda_detail
