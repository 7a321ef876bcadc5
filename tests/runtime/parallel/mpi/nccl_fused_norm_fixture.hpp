#pragma once
// The fixture of the fused all-reduce and norm's tests (nccl_fused_norm_test.cpp), in
// nccl_communicator_test's binary (its main starts MPI and sets g_world).

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/tp_fused.hpp"
#include "runtime/parallel/nccl_communicator.hpp"

namespace weft {

// The MPI world (nccl_communicator_test.cpp).
extern parallel::Communicator* g_world;

// The fused all-reduce + residual add + norm (kernels/cuda/tp_fused.hpp) over a device window
// against NCCL's all-reduce and add_norm of the same rows: on random fp32 rows, for add_norm's
// float4 kernel (4096 wide) and its generic one (1000 wide), both norms, with and without
// biases, the sum alone, and decode rows in a CUDA graph replayed with new inputs (a kernel
// writes each launch's partial rows, the slots alternating as in a step). With two ranks the
// results are bitwise the same: NCCL's sum of two is a + b, the kernel's too, and the rest is
// add_norm's arithmetic in the same order: the sums and residuals are bitwise NCCL's +
// add_norm's, the normalized 16-bit rows within one ulp (the two kernels are compiled apart
// and may differ in FMA contraction; the test counts how many differ). With more ranks NCCL
// may add in another order, so the results are within a few ulps (1e-5 relative; 2 ulps for
// the 16-bit rows); every rank holds bitwise the same residual in both cases (the kernel adds
// in rank order on every rank). Each case runs through the barrier and through the LL
// exchange (ll_group_), which must give the same bits.
class NcclFusedNorm : public ::testing::Test {
 protected:
  void SetUp() override {
    auto& w = *g_world;
    int gpus = 0;
    if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < w.size() || w.size() < 2) {
      cudaGetLastError();
      GTEST_SKIP() << "needs one GPU per rank and at least 2 ranks (have " << gpus << " GPUs, "
                   << w.size() << " ranks)";
    }
    if (!cuda::tp_fused_built()) {
      GTEST_SKIP() << "this build has no NCCL 2.28 device headers (nccl_device.h)";
    }
    ASSERT_EQ(cudaSetDevice(w.rank()), cudaSuccess);
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
    auto nccl = parallel::make_nccl_communicator(w, w.rank(), stream_);
    ASSERT_TRUE(nccl) << nccl.error().what();
    nccl_ = std::move(*nccl);
    const std::size_t ll_bytes = cuda::tp_fused_ll_bytes(w.size(), kRows, 4096);
    ASSERT_GT(ll_bytes, 0u);
    auto win = nccl_->device_window(2 * kSlotBytes + ll_bytes, kRows);
    if (!win) {
      // Say why on every rank: the GPU run must show it.
      std::cout << "[ measured ] rank " << w.rank() << ": " << win.error().what() << "\n";
      ASSERT_EQ(win.error().code(), ErrorCode::kUnsupported) << win.error().what();
      GTEST_SKIP() << win.error().what();
    }
    window_ = *win;
    if (w.rank() == 0) std::cout << "[ measured ] device window: " << window_.description << "\n";
    ASSERT_GE(window_.bytes, 2 * kSlotBytes);
    ASSERT_EQ(window_.barriers, kRows);
    group_.dev_comm = window_.dev_comm;
    group_.window = window_.window;
    group_.barrier_buffer = window_.barrier_buffer;
    group_.barriers = window_.barriers;
    group_.rank = w.rank();
    group_.ranks = w.size();
    // The same group with the LL exchange for rows of up to 4096 (tp_fused.hpp), its area
    // after the two slots.
    ASSERT_GE(window_.bytes, 2 * kSlotBytes + ll_bytes);
    ll_group_ = group_;
    ASSERT_TRUE(cuda::tp_fused_enable_ll(ll_group_, window_.data, 2 * kSlotBytes, kRows, 4096));
    EXPECT_EQ(ll_group_.ll_rows, kRows);
    ASSERT_TRUE(nccl_->barrier());  // every rank's area zeroed before any rank stores into it
  }
  void TearDown() override {
    nccl_.reset();
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  static constexpr int kRows = 16;
  static constexpr std::size_t kSlotBytes = kRows * 4096 * 4;

  // Values in [-1, 1) from (seed, i), different on every rank.
  static float random_value(std::uint32_t seed, std::size_t i) {
    std::uint32_t x = seed * 2654435761u + static_cast<std::uint32_t>(i) * 2246822519u + 12345u;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    return static_cast<float>(x & 0xFFFFFF) / static_cast<float>(0x800000) - 1.0f;
  }
  // random_value(seed, i) * scale rounded toward zero to bf16 bits.
  static std::vector<std::uint16_t> random_bf16_rows(std::uint32_t seed, std::size_t n,
                                                     float scale = 1.0f) {
    std::vector<std::uint16_t> v(n);
    for (std::size_t i = 0; i < n; ++i) {
      const float f = random_value(seed, i) * scale;
      std::uint32_t u = 0;
      std::memcpy(&u, &f, 4);
      v[i] = static_cast<std::uint16_t>(u >> 16);
    }
    return v;
  }
  std::vector<float> random_rows(std::uint32_t seed, std::size_t n) const {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i)
      v[i] = random_value(seed, i);
    return v;
  }
  // Waits for the stream; a fused kernel stuck at its barrier cannot be taken back from the
  // GPU, so after 20 s the test says so and ends the process (mpirun then ends the others).
  cudaError_t finish_or_abort(const char* what) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (true) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e != cudaErrorNotReady) return e;
      if (std::chrono::steady_clock::now() > until) {
        std::cout << "[ measured ] rank " << g_world->rank() << ": " << what
                  << " did not finish in 20 s (stuck at its NCCL LSA barrier); aborting"
                  << std::endl;
        std::abort();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  // Device µs per launch of graph `g` (holding `launches` pairs): every rank replays it once to
  // warm up, then 50 times between two events, starting together.
  double graph_us_per_launch(cudaGraphExec_t g, int launches, const char* what) {
    constexpr int kReplays = 50;
    cudaEvent_t start = nullptr, stop = nullptr;
    if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) {
      ADD_FAILURE() << "cudaEventCreate";
      return 0.0;
    }
    EXPECT_TRUE(nccl_->barrier());
    cudaGraphLaunch(g, stream_);  // warm-up
    EXPECT_EQ(finish_or_abort(what), cudaSuccess);
    EXPECT_TRUE(nccl_->barrier());
    cudaEventRecord(start, stream_);
    for (int i = 0; i < kReplays; ++i)
      cudaGraphLaunch(g, stream_);
    cudaEventRecord(stop, stream_);
    EXPECT_EQ(finish_or_abort(what), cudaSuccess);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return 1000.0 * ms / (kReplays * launches);
  }
  float* slot(int k) const {
    return reinterpret_cast<float*>(static_cast<char*>(window_.data) + k * kSlotBytes);
  }
  // Whether every rank holds the same bytes (gathered over the device communicator).
  void expect_same_on_every_rank(const float* dev, std::size_t n, const char* what) {
    const auto ranks = static_cast<std::size_t>(g_world->size());
    float* all = nullptr;
    ASSERT_EQ(cudaMalloc(&all, n * ranks * 4), cudaSuccess);
    ASSERT_TRUE(
        nccl_->all_gather(std::span<const float>(dev, n), std::span<float>(all, n * ranks)));
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    std::vector<float> host(n * ranks);
    ASSERT_EQ(cudaMemcpy(host.data(), all, n * ranks * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(all);
    for (std::size_t r = 1; r < ranks; ++r) {
      ASSERT_EQ(std::memcmp(host.data(), host.data() + r * n, n * 4), 0)
          << what << ": rank " << r << " differs from rank 0";
    }
  }
  // got == want bitwise with two ranks; within 1e-5 relative (of the row's largest) beyond.
  void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                    const char* what) {
    ASSERT_EQ(got.size(), want.size());
    float scale = 0;
    for (float v : want)
      scale = std::max(scale, std::fabs(v));
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (g_world->size() == 2) {
        ASSERT_EQ(got[i], want[i]) << what << " at " << i;
      } else {
        ASSERT_NEAR(got[i], want[i], 1e-5f * scale) << what << " at " << i;
      }
    }
  }

  cudaStream_t stream_ = nullptr;
  std::unique_ptr<parallel::Communicator> nccl_;
  parallel::DeviceWindow window_;
  cuda::TpFusedGroup group_;     // every launch meets at the LSA barrier
  cuda::TpFusedGroup ll_group_;  // launches of up to kRows rows of 4096 take the LL exchange
};

}  // namespace weft
