// Run under `mpirun -np 2` on a machine with two GPUs (tests/runtime/CMakeLists.txt): NCCL's
// collectives over device buffers, the unique id carried by MPI. Skips with fewer GPUs.

#include "runtime/parallel/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "runtime/parallel/mpi_communicator.hpp"

namespace weft {
namespace {

parallel::Communicator* g_world = nullptr;

TEST(NcclCommunicator, ReducesAndGathersDeviceBuffersAcrossGpus) {
  auto& w = *g_world;
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < w.size() || w.size() < 2) {
    GTEST_SKIP() << "needs one GPU per rank and at least 2 ranks (have " << gpus << " GPUs, "
                 << w.size() << " ranks)";
  }
  const int device = w.rank();
  ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  auto nccl = parallel::make_nccl_communicator(w, device, stream);
  ASSERT_TRUE(nccl) << nccl.error().what();
  auto& c = **nccl;
  EXPECT_TRUE(c.device_buffers());
  EXPECT_EQ(c.rank(), w.rank());

  const std::size_t n = 1000;
  std::vector<float> host(n);
  for (std::size_t i = 0; i < n; ++i)
    host[i] = static_cast<float>(i) * static_cast<float>(w.rank() + 1);
  float* dev = nullptr;
  float* gathered = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&gathered, n * w.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);

  ASSERT_TRUE(c.all_gather(std::span<const float>(dev, n),
                           std::span<float>(gathered, n * static_cast<std::size_t>(w.size()))));
  ASSERT_TRUE(c.all_reduce_sum(std::span<float>(dev, n)));
  ASSERT_TRUE(c.barrier());
  std::vector<float> sum(n), all(n * static_cast<std::size_t>(w.size()));
  ASSERT_EQ(cudaMemcpy(sum.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(all.data(), gathered, all.size() * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  const float ranks_sum = w.size() * (w.size() + 1) / 2.0f;
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(sum[i], static_cast<float>(i) * ranks_sum) << i;
    for (int r = 0; r < w.size(); ++r) {
      ASSERT_EQ(all[static_cast<std::size_t>(r) * n + i], static_cast<float>(i) * (r + 1));
    }
  }
  cudaFree(dev);
  cudaFree(gathered);
  nccl->reset();
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto world = weft::parallel::mpi_world();
  if (!world) {
    std::fprintf(stderr, "%s\n", world.error().what());
    return 1;
  }
  weft::g_world = world->get();
  const int failed = RUN_ALL_TESTS();
  float any = failed != 0 ? 1.0f : 0.0f;
  (void)(*world)->all_reduce_sum(std::span<float>(&any, 1));
  world->reset();
  return any > 0 ? 1 : 0;
}
