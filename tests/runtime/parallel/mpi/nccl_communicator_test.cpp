// Run under `mpirun -np 2` on a machine with two GPUs (tests/runtime/CMakeLists.txt): NCCL's
// collectives over device buffers, the unique id carried by MPI. Skips with fewer GPUs.

#include "runtime/parallel/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/convert.hpp"
#include "kernels/cuda/norm.hpp"
#include "kernels/cuda/stream_fence.hpp"
#include "kernels/cuda/tp_fused.hpp"
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
// in rank order on every rank).
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
    auto win = nccl_->device_window(2 * kSlotBytes, kRows);
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
  cuda::TpFusedGroup group_;
};

TEST_F(NcclFusedNorm, MatchesNcclAllReduceAndAddNorm) {
  const int rank = g_world->rank();
  struct Case {
    int rows, n;
    cuda::NormKind kind;
    bool delta_bias, norm_bias, sum_only;
    cuda::Precision precision;
  };
  const Case cases[] = {
      {1, 4096, cuda::NormKind::kRms, false, false, false, cuda::Precision::kBF16},
      {3, 4096, cuda::NormKind::kRms, true, false, false, cuda::Precision::kF16},
      {16, 4096, cuda::NormKind::kLayer, true, true, false, cuda::Precision::kBF16},
      {1, 1000, cuda::NormKind::kRms, false, false, false, cuda::Precision::kBF16},
      {5, 1000, cuda::NormKind::kLayer, true, true, false, cuda::Precision::kF16},
      {2, 4096, cuda::NormKind::kRms, false, false, true, cuda::Precision::kBF16},
      {7, 1000, cuda::NormKind::kRms, false, false, true, cuda::Precision::kBF16},
      // Rows wider than the float4 kernel's 4096 (Llama-3-70B's 8192): the generic kernel
      // gathers them with 16-byte loads; 1002 is not a multiple of 4 (one float at a time).
      {1, 8192, cuda::NormKind::kRms, false, false, false, cuda::Precision::kBF16},
      {3, 8192, cuda::NormKind::kLayer, true, true, false, cuda::Precision::kF16},
      {2, 8192, cuda::NormKind::kRms, false, false, true, cuda::Precision::kBF16},
      {4, 1002, cuda::NormKind::kRms, true, false, false, cuda::Precision::kBF16},
  };
  int launch = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE("rows " + std::to_string(c.rows) + " n " + std::to_string(c.n) +
                 (c.sum_only ? " sum only" : ""));
    const std::size_t n = static_cast<std::size_t>(c.rows) * c.n;
    const auto partial = random_rows(100 + rank, n);
    const auto residual = random_rows(7, n);  // the same on every rank, as in a model
    const auto weight = random_rows(8, static_cast<std::size_t>(c.n));
    const auto bias = random_rows(9, static_cast<std::size_t>(c.n));
    float *plain = nullptr, *res_a = nullptr, *res_b = nullptr, *w = nullptr, *b = nullptr;
    std::uint16_t *out_a = nullptr, *out_b = nullptr;
    ASSERT_EQ(cudaMalloc(&plain, n * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&res_a, n * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&res_b, n * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&w, c.n * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&b, c.n * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&out_a, n * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&out_b, n * 2), cudaSuccess);
    const int k = launch++ % 2;
    cudaMemcpy(slot(k), partial.data(), n * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(plain, partial.data(), n * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(res_a, residual.data(), n * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(res_b, residual.data(), n * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(w, weight.data(), c.n * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(b, bias.data(), c.n * 4, cudaMemcpyHostToDevice);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the copies landed before peers read
    cuda::AllReduceNormArgs a;
    a.group = group_;
    a.offset = k * kSlotBytes;
    a.rows = c.rows;
    a.n = c.n;
    if (c.sum_only) {
      a.sum_out = res_a;
    } else {
      a.residual = res_a;
      a.delta_bias = c.delta_bias ? b : nullptr;
      a.kind = c.kind;
      a.weight = w;
      a.bias = c.norm_bias ? b : nullptr;
      a.eps = 1e-5f;
      a.out = out_a;
      a.precision = c.precision;
    }
    ASSERT_TRUE(cuda::allreduce_add_norm(a, stream_));
    ASSERT_EQ(finish_or_abort("the fused kernel"), cudaSuccess);
    ASSERT_TRUE(nccl_->all_reduce_sum(std::span<float>(plain, n)));
    if (c.sum_only) {
      cudaMemcpyAsync(res_b, plain, n * 4, cudaMemcpyDeviceToDevice, stream_);
    } else {
      cuda::AddNormArgs r;
      r.residual = res_b;
      r.delta = plain;
      r.delta_bias = a.delta_bias;
      r.rows = c.rows;
      r.n = c.n;
      r.kind = c.kind;
      r.weight = w;
      r.bias = a.bias;
      r.eps = 1e-5f;
      r.out = out_b;
      r.precision = c.precision;
      cuda::add_norm(r, stream_);
    }
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    std::vector<float> got(n), want(n);
    cudaMemcpy(got.data(), res_a, n * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(want.data(), res_b, n * 4, cudaMemcpyDeviceToHost);
    expect_close(got, want, c.sum_only ? "sum" : "residual");
    expect_same_on_every_rank(res_a, n, "the fused residual");
    if (!c.sum_only) {
      // The normalized 16-bit rows: within one unit in the last place of add_norm's (bitwise
      // inputs; the two kernels are compiled apart, and FMA contraction may differ), counted.
      std::vector<std::uint16_t> out_got(n), out_want(n);
      cudaMemcpy(out_got.data(), out_a, n * 2, cudaMemcpyDeviceToHost);
      cudaMemcpy(out_want.data(), out_b, n * 2, cudaMemcpyDeviceToHost);
      std::size_t off_by_one = 0;
      const int most = g_world->size() == 2 ? 1 : 2;
      for (std::size_t i = 0; i < n; ++i) {
        const int ulps = std::abs(static_cast<int>(out_got[i]) - static_cast<int>(out_want[i]));
        ASSERT_LE(ulps, most) << "normalized output at " << i;
        off_by_one += ulps != 0 ? 1 : 0;
      }
      if (rank == 0) {
        std::cout << "[ measured ] fused norm, " << c.rows << " x " << c.n << ": " << off_by_one
                  << " of " << n << " normalized outputs one ulp from add_norm's\n";
      }
    }
    for (void* p : {static_cast<void*>(plain), static_cast<void*>(res_a), static_cast<void*>(res_b),
                    static_cast<void*>(w), static_cast<void*>(b), static_cast<void*>(out_a),
                    static_cast<void*>(out_b)})
      cudaFree(p);
    ASSERT_TRUE(nccl_->barrier());  // no rank rewrites a slot another still reads
  }
  // Rows beyond the barriers, and a norm without a weight, are refused without a launch.
  cuda::AllReduceNormArgs refused;
  refused.group = group_;
  refused.rows = kRows + 1;
  refused.n = 4096;
  refused.sum_out = slot(0);
  EXPECT_FALSE(cuda::allreduce_add_norm(refused, stream_));
  refused.rows = 1;
  refused.residual = slot(0);
  EXPECT_FALSE(cuda::allreduce_add_norm(refused, stream_));
}

// Decode rows in a CUDA graph: 8 launches, each after a kernel that writes its partial rows
// (different for every launch, so a slot rewritten before every rank has read it shows in the
// sums) into the slot it reads (0, 1, 0, ...), the residual carried from one to the next as
// through a step's layers; replayed with new inputs against the same sequence through NCCL and
// add_norm launched plainly.
TEST_F(NcclFusedNorm, RunsInsideCudaGraphs) {
  const int rank = g_world->rank();
  constexpr int kRowsHere = 2, kN = 4096, kLaunches = 8;
  const std::size_t n = static_cast<std::size_t>(kRowsHere) * kN;
  std::uint16_t* input16 = nullptr;  // this replay's partial rows for each launch, bf16
  float *plain = nullptr, *res_a = nullptr, *res_b = nullptr, *w = nullptr;
  std::uint16_t *out_a = nullptr, *out_b = nullptr;
  ASSERT_EQ(cudaMalloc(&input16, kLaunches * n * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&plain, n * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&res_a, n * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&res_b, n * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&w, kN * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&out_a, n * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&out_b, n * 2), cudaSuccess);
  const auto weight = random_rows(8, kN);
  cudaMemcpy(w, weight.data(), kN * 4, cudaMemcpyHostToDevice);
  auto to_bf16 = [](float f) {
    std::uint32_t u = 0;
    std::memcpy(&u, &f, 4);
    return static_cast<std::uint16_t>(u >> 16);
  };
  auto fill = [&](int replay) {
    std::vector<std::uint16_t> h(kLaunches * n);
    for (std::size_t i = 0; i < h.size(); ++i)
      h[i] = to_bf16(random_value(1000 * replay + rank, i));
    const auto residual = random_rows(50 + replay, n);
    cudaMemcpy(input16, h.data(), h.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(res_a, residual.data(), n * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(res_b, residual.data(), n * 4, cudaMemcpyHostToDevice);
    return cudaDeviceSynchronize();
  };
  cuda::AllReduceNormArgs a;
  a.group = group_;
  a.rows = kRowsHere;
  a.n = kN;
  a.residual = res_a;
  a.kind = cuda::NormKind::kRms;
  a.weight = w;
  a.eps = 1e-5f;
  a.out = out_a;
  a.precision = cuda::Precision::kBF16;
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  bool launched = true;
  for (int k = 0; k < kLaunches; ++k) {
    cuda::convert_to_f32(input16 + k * n, cuda::Precision::kBF16, slot(k % 2), n, stream_);
    a.offset = (k % 2) * kSlotBytes;
    launched = cuda::allreduce_add_norm(a, stream_) && launched;
  }
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  ASSERT_TRUE(launched);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  std::vector<float> got(n), want(n);
  for (int replay = 0; replay < 10; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay));
    ASSERT_EQ(fill(replay), cudaSuccess);
    ASSERT_TRUE(nccl_->barrier());  // every rank's inputs are in place (plain copies)
    ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
    ASSERT_EQ(finish_or_abort("the graph of fused kernels"), cudaSuccess);
    for (int k = 0; k < kLaunches; ++k) {
      cuda::convert_to_f32(input16 + k * n, cuda::Precision::kBF16, plain, n, stream_);
      ASSERT_TRUE(nccl_->all_reduce_sum(std::span<float>(plain, n)));
      cuda::AddNormArgs r;
      r.residual = res_b;
      r.delta = plain;
      r.rows = kRowsHere;
      r.n = kN;
      r.kind = cuda::NormKind::kRms;
      r.weight = w;
      r.eps = 1e-5f;
      r.out = out_b;
      r.precision = cuda::Precision::kBF16;
      cuda::add_norm(r, stream_);
    }
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    cudaMemcpy(got.data(), res_a, n * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(want.data(), res_b, n * 4, cudaMemcpyDeviceToHost);
    expect_close(got, want, "residual after 8 launches");
    expect_same_on_every_rank(res_a, n, "the fused residual");
    ASSERT_TRUE(nccl_->barrier());
  }
  // What it saves: the same 8 (writer kernel, reduction) pairs with NCCL's all-reduce and
  // add_norm in a graph too, both replayed 50 times after a warm-up, device time per pair.
  cudaGraph_t ref_graph = nullptr;
  cudaGraphExec_t ref_exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  bool captured = true;
  for (int k = 0; k < kLaunches; ++k) {
    cuda::convert_to_f32(input16 + k * n, cuda::Precision::kBF16, plain, n, stream_);
    captured = static_cast<bool>(nccl_->all_reduce_sum(std::span<float>(plain, n))) && captured;
    cuda::AddNormArgs r;
    r.residual = res_b;
    r.delta = plain;
    r.rows = kRowsHere;
    r.n = kN;
    r.kind = cuda::NormKind::kRms;
    r.weight = w;
    r.eps = 1e-5f;
    r.out = out_b;
    r.precision = cuda::Precision::kBF16;
    cuda::add_norm(r, stream_);
  }
  ASSERT_EQ(cudaStreamEndCapture(stream_, &ref_graph), cudaSuccess);
  ASSERT_TRUE(captured);
  ASSERT_EQ(cudaGraphInstantiate(&ref_exec, ref_graph, 0), cudaSuccess);
  cudaEvent_t start = nullptr, stop = nullptr;
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&stop), cudaSuccess);
  constexpr int kReplays = 50;
  auto time_us = [&](cudaGraphExec_t g, const char* what) {
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
    return 1000.0 * ms / (kReplays * kLaunches);
  };
  const double fused_us = time_us(exec, "the fused graph");
  const double nccl_us = time_us(ref_exec, "the NCCL graph");
  if (rank == 0) {
    std::cout << "[ measured ] " << kRowsHere << " rows of " << kN << " in CUDA graphs, per "
              << "(writer kernel, reduction) pair: fused all-reduce + add + norm " << fused_us
              << " us, NCCL all-reduce + add_norm " << nccl_us << " us\n";
  }
  EXPECT_GT(fused_us, 0.0);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(ref_exec);
  cudaGraphDestroy(ref_graph);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  for (void* p : {static_cast<void*>(input16), static_cast<void*>(plain), static_cast<void*>(res_a),
                  static_cast<void*>(res_b), static_cast<void*>(w), static_cast<void*>(out_a),
                  static_cast<void*>(out_b)})
    cudaFree(p);
}

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
