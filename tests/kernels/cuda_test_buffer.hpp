#pragma once
// Device memory for the CUDA kernel tests: an array allocated (and optionally filled) on
// construction, freed on destruction, read back after a device-wide synchronisation. Failed
// CUDA calls are test failures. Also the tests' shared pieces: normal random inputs and a
// fixture per precision that skips where no GPU is visible.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cuda/convert.hpp"
#include "kernels/cuda/device_info.hpp"

namespace weft::cuda::test_support {

template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(std::size_t n) : n_(n) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p_), std::max<std::size_t>(n, 1) * sizeof(T)),
              cudaSuccess);
  }
  explicit DeviceArray(const std::vector<T>& v) : DeviceArray(v.size()) { upload(v); }
  ~DeviceArray() { cudaFree(p_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  void upload(const std::vector<T>& v) {
    ASSERT_EQ(cudaMemcpy(p_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> download() const {
    std::vector<T> v(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(v.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  T* get() const { return p_; }

 private:
  T* p_ = nullptr;
  std::size_t n_;
};

// The first n 16-bit elements of `h` (precision p) as floats.
inline std::vector<float> widened(const DeviceArray<std::uint16_t>& h, std::size_t n, Precision p) {
  DeviceArray<float> f(n);
  convert_to_f32(h.get(), p, f.get(), n, nullptr);
  return f.download();
}

// n values drawn from N(0, scale^2).
inline std::vector<float> random_vector(std::size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v)
    x = dist(rng);
  return v;
}

// A parameterized GPU test: skips, saying why, where no GPU is visible.
template <class Param>
class GpuTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const DeviceList list = visible_devices();
    if (list.devices.empty()) {
      GTEST_SKIP() << "no GPU visible (" << list.unavailable_reason
                   << "): GPU checks run on the device machine through scripts/gpu-check";
    }
  }
};

// The same per precision (bf16, fp16).
class PrecisionTest : public GpuTest<Precision> {
 protected:
  Precision p() const { return this->GetParam(); }
};

}  // namespace weft::cuda::test_support
