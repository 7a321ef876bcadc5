#pragma once
// Host-side pieces every CUDA model shares (CudaModel, CudaEncoder, CudaSeq2Seq): CUDA errors
// as Weft errors, picking the device, step buffers, how a backend describes itself, and the
// spec's enums in the kernels' terms. Host code only; internal to runtime/model/cuda.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <initializer_list>
#include <string>
#include <utility>

#include "kernels/cuda/activation.hpp"
#include "kernels/cuda/precision.hpp"
#include "runtime/model/cuda/device_buffer.hpp"
#include "runtime/model/model_spec.hpp"
#include "weft/error.hpp"
#include "weft/tensor.hpp"

namespace weft::model::cuda_detail {

// kResourceExhausted for cudaErrorMemoryAllocation, else kInternal; "CUDA: what: reason".
inline Error cuda_error(cudaError_t err, const std::string& what) {
  const ErrorCode code =
      err == cudaErrorMemoryAllocation ? ErrorCode::kResourceExhausted : ErrorCode::kInternal;
  return Error(code, "CUDA: " + what + ": " + cudaGetErrorString(err));
}

// Makes `device` current; kUnsupported when no GPU is visible, kInvalidArgument for an index
// outside the visible ones.
inline Result<void> select_device(int device) {
  int count = 0;
  if (auto err = cudaGetDeviceCount(&count); err != cudaSuccess || count == 0) {
    cudaGetLastError();
    return Error(ErrorCode::kUnsupported,
                 "CUDA: no device: " +
                     std::string(err != cudaSuccess ? cudaGetErrorString(err) : "none is visible"));
  }
  if (device < 0 || device >= count) {
    return Error(ErrorCode::kInvalidArgument, "CUDA: device " + std::to_string(device) +
                                                  " does not exist (" + std::to_string(count) +
                                                  " visible)");
  }
  if (auto err = cudaSetDevice(device); err != cudaSuccess) {
    return cuda_error(err, "selecting device " + std::to_string(device));
  }
  return {};
}

// Makes each buffer hold at least its bytes: a forward pass's step buffers for `tokens` rows.
inline Result<void> reserve_step_buffers(
    std::initializer_list<std::pair<DeviceBuffer*, std::size_t>> wants, int tokens) {
  for (const auto& [buffer, bytes] : wants) {
    if (auto err = buffer->reserve(bytes); err != cudaSuccess) {
      return cuda_error(err, "allocating step buffers for " + std::to_string(tokens) + " tokens");
    }
  }
  return {};
}

// "cuda:<device> (<precision>)", a backend's describe().
inline std::string describe_backend(int device, cuda::Precision precision) {
  return "cuda:" + std::to_string(device) + " (" + cuda::precision_name(precision) + ")";
}

inline cuda::ActivationKind kernel_activation(Activation a) {
  switch (a) {
    case Activation::kSilu:
      return cuda::ActivationKind::kSilu;
    case Activation::kGelu:
      return cuda::ActivationKind::kGelu;
    case Activation::kGeluTanh:
      return cuda::ActivationKind::kGeluTanh;
    case Activation::kRelu:
      return cuda::ActivationKind::kRelu;
  }
  return cuda::ActivationKind::kSilu;
}

// The element type of host weights as the conversion kernels name it.
inline cuda::SourceType source_type(DType d) {
  return d == DType::kF32   ? cuda::SourceType::kF32
         : d == DType::kF16 ? cuda::SourceType::kF16
                            : cuda::SourceType::kBF16;
}

}  // namespace weft::model::cuda_detail
