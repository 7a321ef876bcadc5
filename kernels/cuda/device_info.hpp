#pragma once
// The GPUs this process can see. Plain C++ so that code outside nvcc can include it.

#include <cstddef>
#include <string>
#include <vector>

namespace weft::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  std::size_t total_memory_bytes = 0;
  int multiprocessors = 0;
};

struct DeviceList {
  std::vector<DeviceInfo> devices;
  // Why the list is empty when it is: "no CUDA driver", "no CUDA-capable device", ...
  std::string unavailable_reason;
  int driver_version = 0;   // e.g. 13000 for 13.0; 0 without a driver
  int runtime_version = 0;  // the CUDA runtime Weft was built with
};

// Never throws and never aborts: a machine without a GPU or driver gets an empty list and a
// reason.
DeviceList visible_devices();

}  // namespace weft::cuda
