// Run under `mpirun -np 2` on a machine with two GPUs (tests/runtime/CMakeLists.txt): NCCL's
// send and receive of device buffers (what a GPU pipeline stage hands the next), and a split of
// the NCCL group. Skips with fewer GPUs.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "runtime/parallel/mpi_communicator.hpp"
#include "runtime/parallel/nccl_communicator.hpp"
#include "tests/runtime/parallel/mpi/mpi_gtest_main.hpp"

namespace weft {
namespace {

parallel::Communicator* g_world = nullptr;

TEST(NcclPointToPoint, SendsDeviceBuffersBetweenGpusAndSplits) {
  auto& w = *g_world;
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < w.size() || w.size() != 2) {
    GTEST_SKIP() << "needs two ranks with a GPU each (have " << gpus << " GPUs, " << w.size()
                 << " ranks)";
  }
  ASSERT_EQ(cudaSetDevice(w.rank()), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  auto nccl = parallel::make_nccl_communicator(w, w.rank(), stream);
  ASSERT_TRUE(nccl) << nccl.error().what();
  auto& c = **nccl;
  const std::size_t n = 4096;
  float* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, n * sizeof(float)), cudaSuccess);
  std::vector<float> host(n);
  auto bytes = [&] { return std::span<std::byte>(reinterpret_cast<std::byte*>(dev), n * 4); };
  if (w.rank() == 0) {
    for (std::size_t i = 0; i < n; ++i)
      host[i] = 0.5f * static_cast<float>(i);
    ASSERT_EQ(cudaMemcpy(dev, host.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_TRUE(c.send(bytes(), 1));
    ASSERT_TRUE(c.recv(bytes(), 1));  // rank 1 sends back what it got, plus one
  } else {
    ASSERT_TRUE(c.recv(bytes(), 0));
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(host.data(), dev, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (auto& v : host)
      v += 1.0f;
    ASSERT_EQ(cudaMemcpy(dev, host.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_TRUE(c.send(bytes(), 0));
  }
  ASSERT_TRUE(c.wait_sends());
  ASSERT_EQ(cudaMemcpy(host.data(), dev, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(host[i], 0.5f * static_cast<float>(i) + 1.0f) << i;
  }
  EXPECT_FALSE(c.send(bytes(), 5));  // no such rank
  // One group per rank: a reduction over a group of one leaves the data as it is.
  auto alone = c.split(w.rank(), 0);
  ASSERT_TRUE(alone) << alone.error().what();
  EXPECT_EQ((*alone)->size(), 1);
  EXPECT_TRUE((*alone)->device_buffers());
  ASSERT_TRUE((*alone)->all_reduce_sum(std::span<float>(dev, n)));
  ASSERT_TRUE((*alone)->barrier());
  ASSERT_EQ(cudaMemcpy(host.data(), dev, 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(host[0], 1.0f);
  alone->reset();
  cudaFree(dev);
  nccl->reset();
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  return weft::test_support::mpi_gtest_main(argc, argv, weft::g_world);
}
