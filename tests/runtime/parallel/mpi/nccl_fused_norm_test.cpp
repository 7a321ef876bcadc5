// Run under `mpirun -np 2` (or 4) with a GPU per rank, in nccl_communicator_test's binary: the
// fused all-reduce + residual add + norm against NCCL's all-reduce and add_norm
// (NcclFusedNorm, nccl_fused_norm_fixture.hpp), and its time in CUDA graphs.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include "kernels/cuda/convert.hpp"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/norm.hpp"
#include "kernels/cuda/tp_fused.hpp"
#include "tests/runtime/parallel/mpi/nccl_fused_norm_fixture.hpp"

namespace weft {
namespace {

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
  // Every case through the barrier, then through the LL exchange (ll_group_), which must give
  // the barrier's results (residual or sum, then the normalized rows) bit for bit.
  constexpr std::size_t kCases = sizeof(cases) / sizeof(cases[0]);
  std::vector<float> barrier_res[kCases];
  std::vector<std::uint16_t> barrier_out[kCases];
  for (std::size_t pass = 0; pass < 2 * kCases; ++pass) {
    const bool ll = pass >= kCases;
    const std::size_t ci = pass % kCases;
    const Case& c = cases[ci];
    SCOPED_TRACE("rows " + std::to_string(c.rows) + " n " + std::to_string(c.n) +
                 (c.sum_only ? " sum only" : "") + (ll ? ", LL exchange" : ", barrier"));
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
    a.group = ll ? ll_group_ : group_;
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
    if (!ll) {
      barrier_res[ci] = got;
    } else {
      ASSERT_EQ(std::memcmp(got.data(), barrier_res[ci].data(), n * 4), 0)
          << "the LL exchange's " << (c.sum_only ? "sum" : "residual")
          << " differs from the barrier's";
    }
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
      if (!ll) {
        barrier_out[ci] = out_got;
      } else {
        ASSERT_EQ(std::memcmp(out_got.data(), barrier_out[ci].data(), n * 2), 0)
            << "the LL exchange's normalized rows differ from the barrier's";
      }
      if (rank == 0) {
        std::cout << "[ measured ] fused norm" << (ll ? " (LL)" : "") << ", " << c.rows << " x "
                  << c.n << ": " << off_by_one << " of " << n
                  << " normalized outputs one ulp from add_norm's\n";
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

// Decode rows (1, 2 and 16 of 4096; through the barrier, then the LL exchange) in a CUDA graph: 8
// launches, each after a kernel that writes its partial rows (different for every launch, so a slot
// rewritten before every rank has read it shows in the sums) into the slot it reads (0, 1, 0, ...),
// the residual carried from one to the next as through a step's layers; replayed with new inputs
// against the same sequence through NCCL and add_norm launched plainly, then timed against it.
TEST_F(NcclFusedNorm, RunsInsideCudaGraphs) {
  const int rank = g_world->rank();
  constexpr int kN = 4096, kLaunches = 8;
  constexpr int kRowCounts[] = {1, 2, 16};
  for (int pass = 0; pass < 6; ++pass) {  // through the barrier, then the LL exchange
    const bool ll = pass >= 3;
    const int rows = kRowCounts[pass % 3];
    SCOPED_TRACE("rows " + std::to_string(rows) + (ll ? ", LL exchange" : ", barrier"));
    const std::size_t n = static_cast<std::size_t>(rows) * kN;
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
    auto fill = [&](int replay) {
      const auto h = random_bf16_rows(1000 * replay + rank, kLaunches * n);
      const auto residual = random_rows(50 + replay, n);
      cudaMemcpy(input16, h.data(), h.size() * 2, cudaMemcpyHostToDevice);
      cudaMemcpy(res_a, residual.data(), n * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(res_b, residual.data(), n * 4, cudaMemcpyHostToDevice);
      return cudaDeviceSynchronize();
    };
    // The reference's add_norm after NCCL's all-reduce of the same partial rows (into `plain`).
    auto reference = [&] {
      cuda::AddNormArgs r;
      r.residual = res_b;
      r.delta = plain;
      r.rows = rows;
      r.n = kN;
      r.kind = cuda::NormKind::kRms;
      r.weight = w;
      r.eps = 1e-5f;
      r.out = out_b;
      r.precision = cuda::Precision::kBF16;
      return r;
    };
    cuda::AllReduceNormArgs a;
    a.group = ll ? ll_group_ : group_;
    a.rows = rows;
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
        cuda::add_norm(reference(), stream_);
      }
      ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      cudaMemcpy(got.data(), res_a, n * 4, cudaMemcpyDeviceToHost);
      cudaMemcpy(want.data(), res_b, n * 4, cudaMemcpyDeviceToHost);
      expect_close(got, want, "residual after 8 launches");
      expect_same_on_every_rank(res_a, n, "the fused residual");
      ASSERT_TRUE(nccl_->barrier());
    }
    {  // the last replay's normalized outputs: within one ulp of add_norm's (two above two ranks)
      std::vector<std::uint16_t> out_got(n), out_want(n);
      cudaMemcpy(out_got.data(), out_a, n * 2, cudaMemcpyDeviceToHost);
      cudaMemcpy(out_want.data(), out_b, n * 2, cudaMemcpyDeviceToHost);
      const int most = g_world->size() == 2 ? 1 : 2;  // as in MatchesNcclAllReduceAndAddNorm
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_LE(std::abs(static_cast<int>(out_got[i]) - static_cast<int>(out_want[i])), most)
            << "normalized output of the last launch at " << i;
      }
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
      cuda::add_norm(reference(), stream_);
    }
    ASSERT_EQ(cudaStreamEndCapture(stream_, &ref_graph), cudaSuccess);
    ASSERT_TRUE(captured);
    ASSERT_EQ(cudaGraphInstantiate(&ref_exec, ref_graph, 0), cudaSuccess);
    const double fused_us = graph_us_per_launch(exec, kLaunches, "the fused graph");
    const double nccl_us = graph_us_per_launch(ref_exec, kLaunches, "the NCCL graph");
    if (rank == 0) {
      std::cout << "[ measured ] " << rows << " rows of " << kN << " over " << g_world->size()
                << " GPUs in CUDA graphs, per "
                << "(writer kernel, reduction) pair: fused all-reduce + add + norm"
                << (ll ? " (LL exchange) " : " (barrier) ") << fused_us
                << " us, NCCL all-reduce + add_norm " << nccl_us << " us\n";
    }
    EXPECT_GT(fused_us, 0.0);
    cudaGraphExecDestroy(ref_exec);
    cudaGraphDestroy(ref_graph);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    for (void* p : {static_cast<void*>(input16), static_cast<void*>(plain),
                    static_cast<void*>(res_a), static_cast<void*>(res_b), static_cast<void*>(w),
                    static_cast<void*>(out_a), static_cast<void*>(out_b)})
      cudaFree(p);
    ASSERT_TRUE(nccl_->barrier());  // no rank rewrites a slot another still reads
  }
}

// A row-parallel product that pushes its own rows into the LL exchange (gemv with
// tp_fused_push; ll_push.hpp) followed by the fused kernel that only waits for the peers'
// (AllReduceNormArgs::pushed), against the same product and the fused kernel pushing: 8
// (product, fused kernel) pairs in a CUDA graph as through a step's layers, each product of
// different inputs into the slot its fused kernel reads, replayed with new inputs; the
// residuals and normalized rows must be bitwise the same, at 1, 2 and 8 tokens (gemv's
// warps of 2 and of 4 rows). Then both graphs timed.
TEST_F(NcclFusedNorm, ProductsPushIntoTheLlExchange) {
  const int rank = g_world->rank();
  cuda::TpFusedGroup push_group = ll_group_;
  ASSERT_TRUE(cuda::tp_fused_enable_push(push_group, stream_));
  const cuda::LlPush push = cuda::tp_fused_push(push_group);
  constexpr int kN = 4096, kIn = 2048, kLaunches = 8;
  for (int tokens : {1, 2, 8}) {
    SCOPED_TRACE(std::to_string(tokens) + " tokens");
    ASSERT_TRUE(push.takes(tokens, kN));
    const std::size_t n = static_cast<std::size_t>(tokens) * kN;
    const std::size_t xn = static_cast<std::size_t>(tokens) * kIn;
    std::uint16_t *x = nullptr, *wt = nullptr, *out_a = nullptr, *out_b = nullptr;
    float *res_a = nullptr, *res_b = nullptr, *w = nullptr;
    ASSERT_EQ(cudaMalloc(&x, kLaunches * xn * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&wt, static_cast<std::size_t>(kN) * kIn * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&res_a, n * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&res_b, n * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&w, kN * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&out_a, n * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&out_b, n * 2), cudaSuccess);
    {
      const auto h = random_bf16_rows(300 + rank, static_cast<std::size_t>(kN) * kIn, 0.05f);
      cudaMemcpy(wt, h.data(), h.size() * 2, cudaMemcpyHostToDevice);
      const auto weight = random_rows(8, kN);
      cudaMemcpy(w, weight.data(), kN * 4, cudaMemcpyHostToDevice);
    }
    auto fill = [&](int replay) {
      const auto h = random_bf16_rows(2000 * replay + rank, kLaunches * xn);
      const auto residual = random_rows(60 + replay, n);
      cudaMemcpy(x, h.data(), h.size() * 2, cudaMemcpyHostToDevice);
      cudaMemcpy(res_a, residual.data(), n * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(res_b, residual.data(), n * 4, cudaMemcpyHostToDevice);
      return cudaDeviceSynchronize();
    };
    // The 8 pairs, the products pushing (`pushing`) or not, captured into a graph.
    auto capture = [&](bool pushing, cudaGraphExec_t* exec) {
      cuda::AllReduceNormArgs a;
      a.group = pushing ? push_group : ll_group_;
      a.rows = tokens;
      a.n = kN;
      a.residual = pushing ? res_a : res_b;
      a.kind = cuda::NormKind::kRms;
      a.weight = w;
      a.eps = 1e-5f;
      a.out = pushing ? out_a : out_b;
      a.precision = cuda::Precision::kBF16;
      a.pushed = pushing;
      ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
      bool launched = true;
      for (int k = 0; k < kLaunches; ++k) {
        cuda::gemv(x + k * xn, tokens, wt, kN, kIn, slot(k % 2), kN, cuda::Precision::kBF16,
                   stream_, pushing ? &push : nullptr);
        a.offset = (k % 2) * kSlotBytes;
        launched = cuda::allreduce_add_norm(a, stream_) && launched;
      }
      cudaGraph_t graph = nullptr;
      ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
      ASSERT_TRUE(launched);
      ASSERT_EQ(cudaGraphInstantiate(exec, graph, 0), cudaSuccess);
      cudaGraphDestroy(graph);
    };
    cudaGraphExec_t pushing_exec = nullptr, plain_exec = nullptr;
    capture(true, &pushing_exec);
    capture(false, &plain_exec);
    ASSERT_NE(pushing_exec, nullptr);
    ASSERT_NE(plain_exec, nullptr);
    std::vector<float> got(n), want(n);
    std::vector<std::uint16_t> out_got(n), out_want(n);
    for (int replay = 0; replay < 10; ++replay) {
      SCOPED_TRACE("replay " + std::to_string(replay));
      ASSERT_EQ(fill(replay), cudaSuccess);
      ASSERT_TRUE(nccl_->barrier());
      // Alternately first, so that either runs on counters the other left.
      for (cudaGraphExec_t g : replay % 2 == 0 ? std::array{pushing_exec, plain_exec}
                                               : std::array{plain_exec, pushing_exec}) {
        ASSERT_EQ(cudaGraphLaunch(g, stream_), cudaSuccess);
      }
      ASSERT_EQ(finish_or_abort("the graphs of products and fused kernels"), cudaSuccess);
      cudaMemcpy(got.data(), res_a, n * 4, cudaMemcpyDeviceToHost);
      cudaMemcpy(want.data(), res_b, n * 4, cudaMemcpyDeviceToHost);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), n * 4), 0)
          << "residuals after the pushed launches differ from the fused kernel's own pushes";
      cudaMemcpy(out_got.data(), out_a, n * 2, cudaMemcpyDeviceToHost);
      cudaMemcpy(out_want.data(), out_b, n * 2, cudaMemcpyDeviceToHost);
      ASSERT_EQ(std::memcmp(out_got.data(), out_want.data(), n * 2), 0)
          << "normalized rows after the pushed launches differ";
      expect_same_on_every_rank(res_a, n, "the pushed residual");
      ASSERT_TRUE(nccl_->barrier());
    }
    const double pushing_us = graph_us_per_launch(pushing_exec, kLaunches, "the pushing graph");
    const double plain_us = graph_us_per_launch(plain_exec, kLaunches, "the plain graph");
    if (rank == 0) {
      std::cout << "[ measured ] " << tokens << " x " << kIn << " -> " << kN << " products over "
                << g_world->size() << " GPUs in CUDA graphs, per (gemv, fused kernel) pair: "
                << "products pushing " << pushing_us << " us, the fused kernel pushing " << plain_us
                << " us\n";
    }
    cudaGraphExecDestroy(pushing_exec);
    cudaGraphExecDestroy(plain_exec);
    for (void* p : {static_cast<void*>(x), static_cast<void*>(wt), static_cast<void*>(res_a),
                    static_cast<void*>(res_b), static_cast<void*>(w), static_cast<void*>(out_a),
                    static_cast<void*>(out_b)})
      cudaFree(p);
    ASSERT_TRUE(nccl_->barrier());
  }
  // A pushed launch that would not take the LL exchange is refused without a launch.
  cuda::AllReduceNormArgs refused;
  refused.group = push_group;
  refused.rows = kRows;
  refused.n = 1000;  // the generic kernel's width
  refused.sum_out = slot(0);
  refused.pushed = true;
  EXPECT_FALSE(cuda::allreduce_add_norm(refused, stream_));
}

}  // namespace
}  // namespace weft
