#include "kernels/cuda/device_info.hpp"

#include <gtest/gtest.h>

namespace weft::cuda {
namespace {

TEST(DeviceInfo, ListsDevicesOrSaysWhyNone) {
  DeviceList list = visible_devices();
  EXPECT_GT(list.runtime_version, 0) << "the CUDA runtime should always report its version";
  if (list.devices.empty()) {
    EXPECT_FALSE(list.unavailable_reason.empty());
    GTEST_SKIP() << "no GPU visible (" << list.unavailable_reason
                 << "): GPU checks run on the device machine through scripts/gpu-check";
  }
  for (const auto& d : list.devices) {
    EXPECT_FALSE(d.name.empty());
    EXPECT_GT(d.total_memory_bytes, 0u);
    EXPECT_GT(d.multiprocessors, 0);
  }
}

}  // namespace
}  // namespace weft::cuda
