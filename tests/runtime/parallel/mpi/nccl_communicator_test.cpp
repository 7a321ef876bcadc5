// Run under `mpirun -np 2` on a machine with two GPUs (tests/runtime/CMakeLists.txt): NCCL's
// collectives over device buffers, the unique id carried by MPI. Skips with fewer GPUs. The
// fused all-reduce and norm's tests are in nccl_fused_norm_test.cpp, in the same binary.

#include "runtime/parallel/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/cuda/convert.hpp"
#include "kernels/cuda/stream_fence.hpp"
#include "runtime/parallel/mpi_communicator.hpp"
#include "tests/runtime/parallel/mpi/mpi_gtest_main.hpp"

namespace weft {

// The MPI world, for these tests and those of nccl_fused_norm_test.cpp (linked into this
// binary).
parallel::Communicator* g_world = nullptr;

namespace {

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

// The group's collective memory (registered buffers, symmetric windows): in-place fp32 and bf16
// all-reduces and an all-gather within it, first launched plainly, then captured in a CUDA
// graph and replayed with new inputs written by a kernel just before the collective (the
// order the forward pass has: a product writes o's output, the all-reduce sums it), with the
// fence kernel between them when the memory asks for it. Where NCCL refuses the memory on
// this machine (too old, no CUDA VMM), every rank says why and the test skips.
class NcclCollectiveMemory : public ::testing::TestWithParam<parallel::CollectiveMemoryKind> {};

TEST_P(NcclCollectiveMemory, ReducesAndGathersInItInsideCudaGraphs) {
  auto& w = *g_world;
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < w.size() || w.size() < 2) {
    cudaGetLastError();
    GTEST_SKIP() << "needs one GPU per rank and at least 2 ranks (have " << gpus << " GPUs, "
                 << w.size() << " ranks)";
  }
  const auto kind = GetParam();
  const int device = w.rank();
  ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  auto nccl = parallel::make_nccl_communicator(w, device, stream);
  ASSERT_TRUE(nccl) << nccl.error().what();
  auto& c = **nccl;

  // One decode row of the 8B shape (4096 floats) and a batch-64 step's rows.
  const std::size_t n = 64 * 4096, ranks = static_cast<std::size_t>(w.size());
  const std::size_t bytes = (n + n + n * ranks) * sizeof(float) + n * 2;
  auto mem = c.collective_memory(bytes, kind);
  if (!mem) {
    ASSERT_EQ(mem.error().code(), ErrorCode::kUnsupported) << mem.error().what();
    if (w.rank() == 0) std::cout << "[ measured ] " << mem.error().what() << "\n";
    nccl->reset();
    cudaStreamDestroy(stream);
    GTEST_SKIP() << mem.error().what();
  }
  ASSERT_GE(mem->bytes, bytes);
  EXPECT_EQ(mem->kind, kind);
  if (w.rank() == 0) {
    std::cout << "[ measured ] " << parallel::collective_memory_kind_name(kind)
              << " collective memory: " << mem->description << "\n";
  }
  auto* sum = static_cast<float*>(mem->data);  // n: the all-reduced rows
  float* mine = sum + n;                       // n: this rank's part of the gather
  float* all = mine + n;                       // n * ranks: everyone's
  auto* sum16 = reinterpret_cast<std::uint16_t*>(all + n * ranks);  // n bf16 values
  // The inputs as bf16 in plain memory; convert_to_f32 (a kernel) writes them into `sum`.
  std::uint16_t* input16 = nullptr;
  ASSERT_EQ(cudaMalloc(&input16, n * 2), cudaSuccess);
  auto bf16 = [](float f) {  // truncates: exact for integers up to 256, not beyond
    std::uint32_t u = 0;
    std::memcpy(&u, &f, 4);
    return static_cast<std::uint16_t>(u >> 16);
  };
  auto from16 = [](std::uint16_t h) {
    const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
    float f = 0;
    std::memcpy(&f, &u, 4);
    return f;
  };
  // Rank k's input at i in replay r, as the bf16 it is sent as (with 4 ranks or more the
  // larger values are not exact in bf16), and the sum over the ranks of those.
  auto input = [&](std::size_t i, std::size_t r, std::size_t k) {
    return from16(bf16(static_cast<float>((i % 61 + r) * (k + 1))));
  };
  auto expected_sum = [&](std::size_t i, std::size_t r) {
    float s = 0;
    for (std::size_t k = 0; k < ranks; ++k)
      s += input(i, r, k);
    return s;
  };
  std::vector<std::uint16_t> host16(n);
  std::vector<float> got(n), gathered(n * ranks);
  // Replay r: rank k's value at i is (i % 61 + r) * (k + 1), in bf16.
  auto fill = [&](int r) {
    for (std::size_t i = 0; i < n; ++i)
      host16[i] = bf16(static_cast<float>((i % 61 + r) * (w.rank() + 1)));
    return cudaMemcpy(input16, host16.data(), n * 2, cudaMemcpyHostToDevice);
  };
  std::size_t rows = 1;  // the all-reduce's length in rows of 4096 (1 in the graph: decode)
  auto enqueue = [&] {
    cuda::convert_to_f32(input16, cuda::Precision::kBF16, sum, rows * 4096, stream);
    if (mem->fence_before_collectives) cuda::stream_fence(stream);
    return c.all_reduce_sum(std::span<float>(sum, rows * 4096));
  };
  // The float sums of integers are exact in any order; a bf16 all-reduce rounds its partial
  // sums (tolerance: one bf16 step per rank).
  auto check = [&](int r, const char* where, bool in_bf16 = false) {
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess) << where;
    ASSERT_EQ(cudaMemcpy(got.data(), sum, rows * 4096 * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (std::size_t i = 0; i < rows * 4096; ++i) {
      const float want = expected_sum(i, static_cast<std::size_t>(r));
      if (in_bf16) {
        ASSERT_NEAR(got[i], want, want * static_cast<float>(ranks) / 128.0f)
            << where << " at " << i;
      } else {
        ASSERT_EQ(got[i], want) << where << " at " << i;
      }
    }
  };
  // Plainly launched: a decode row, then a batch of 64 rows.
  for (std::size_t r : {std::size_t{1}, std::size_t{64}}) {
    rows = r;
    ASSERT_EQ(fill(static_cast<int>(r)), cudaSuccess);
    ASSERT_TRUE(enqueue());
    check(static_cast<int>(r), "plain launch");
  }
  // bf16, and the gather of every rank's part.
  ASSERT_EQ(fill(3), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(sum16, input16, n * 2, cudaMemcpyDeviceToDevice), cudaSuccess);
  cuda::convert_to_f32(input16, cuda::Precision::kBF16, mine, n, stream);
  if (mem->fence_before_collectives) cuda::stream_fence(stream);
  ASSERT_TRUE(c.all_reduce_sum_bf16(std::span<std::uint16_t>(sum16, n)));
  ASSERT_TRUE(c.all_gather(std::span<const float>(mine, n), std::span<float>(all, n * ranks)));
  cuda::convert_to_f32(sum16, cuda::Precision::kBF16, sum, n, stream);
  rows = 64;
  check(3, "bf16 all-reduce", true);
  ASSERT_EQ(cudaMemcpy(gathered.data(), all, gathered.size() * 4, cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (std::size_t k = 0; k < ranks; ++k) {
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(gathered[k * n + i], input(i, 3, k)) << k << " " << i;
    }
  }
  // A graph of 8 (kernel, all-reduce) pairs on one decode row, replayed with new inputs.
  rows = 1;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  bool enqueued = true;
  for (int k = 0; k < 8; ++k)
    enqueued = enqueue() && enqueued;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(enqueued);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  // Each pair rewrites `sum` from the same input, so after the graph it holds one sum.
  for (int r = 0; r < 20; ++r) {
    ASSERT_EQ(fill(r), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    check(r, "graph replay");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(input16);
  nccl->reset();  // frees the collective memory
  cudaStreamDestroy(stream);
}

INSTANTIATE_TEST_SUITE_P(Kinds, NcclCollectiveMemory,
                         ::testing::Values(parallel::CollectiveMemoryKind::kRegistered,
                                           parallel::CollectiveMemoryKind::kSymmetric),
                         [](const auto& info) {
                           return std::string(parallel::collective_memory_kind_name(info.param));
                         });

// Plain memory is the caller's own: asking the communicator for it is an error, on every rank.
TEST(NcclCollectiveMemory, RefusesPlainAndEmptyRequests) {
  auto& w = *g_world;
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < w.size() || w.size() < 2) {
    cudaGetLastError();
    GTEST_SKIP() << "needs one GPU per rank and at least 2 ranks";
  }
  ASSERT_EQ(cudaSetDevice(w.rank()), cudaSuccess);
  auto nccl = parallel::make_nccl_communicator(w, w.rank(), nullptr);
  ASSERT_TRUE(nccl) << nccl.error().what();
  auto plain = (*nccl)->collective_memory(4096, parallel::CollectiveMemoryKind::kPlain);
  ASSERT_FALSE(plain);
  EXPECT_EQ(plain.error().code(), ErrorCode::kInvalidArgument);
  auto empty = (*nccl)->collective_memory(0, parallel::CollectiveMemoryKind::kSymmetric);
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code(), ErrorCode::kInvalidArgument);
  nccl->reset();
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  return weft::test_support::mpi_gtest_main(argc, argv, weft::g_world);
}
