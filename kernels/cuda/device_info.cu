#include <cuda_runtime.h>

#include "kernels/cuda/device_info.hpp"

namespace weft::cuda {

DeviceList visible_devices() {
  DeviceList list;
  cudaRuntimeGetVersion(&list.runtime_version);
  cudaDriverGetVersion(&list.driver_version);
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    list.unavailable_reason = cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return list;
  }
  if (count == 0) list.unavailable_reason = "no CUDA-capable device is detected";
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    DeviceInfo info;
    info.index = i;
    info.name = prop.name;
    info.compute_major = prop.major;
    info.compute_minor = prop.minor;
    info.total_memory_bytes = prop.totalGlobalMem;
    info.multiprocessors = prop.multiProcessorCount;
    list.devices.push_back(std::move(info));
  }
  return list;
}

}  // namespace weft::cuda
