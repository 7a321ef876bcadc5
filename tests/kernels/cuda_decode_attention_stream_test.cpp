// The streaming decode attention (DecodeAttentionKernel::kStream, kernels/cuda/
// decode_attention_stream.cu) against cpu::paged_attention and the per-split kernel: the
// pipelined kernel's cases (contexts that are not page multiples, GQA 1/3/4/8, head dims
// 64/128/256, shuffled pages, windows) and random batches (1 to 256 sequences, contexts drawn
// from 1..4096), bf16 and fp16 pages; its output is bitwise the same for every cut into parts
// and for a token alone or in a batch, and with the rotary embedding applied in the kernel it
// is bitwise rope_store_kv followed by the kernel. Skips without a GPU.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/decode_attention_stream.hpp"
#include "kernels/cuda/paged_attention.hpp"
#include "tests/kernels/decode_attention_batch.hpp"

namespace weft::cuda {
namespace {

class CudaDecodeAttentionStream : public CudaDecodeAttention {};

TEST_P(CudaDecodeAttentionStream, MatchesCpuAndSplitKernel) {
  const Case cases[] = {
      {{32, 8, 128, 16}, 1, 1300, 0},   {{32, 8, 128, 16}, 16, 700, 0},
      {{32, 8, 128, 16}, 3, 2100, 300}, {{2, 2, 128, 5}, 12, 6000, 0},
      {{2, 2, 128, 5}, 3, 700, 100},    {{16, 2, 128, 16}, 37, 2100, 0},
      {{16, 2, 128, 16}, 4, 6000, 0},   {{6, 2, 64, 3}, 37, 2100, 0},
      {{6, 2, 64, 3}, 24, 6000, 1000},  {{2, 2, 256, 16}, 4, 6000, 0},
      {{32, 4, 128, 7}, 8, 2100, 0},    {{16, 2, 256, 16}, 5, 2100, 0},
  };
  for (const Case& c : cases) {
    ASSERT_TRUE(detail::decode_stream_supports(c.shape.heads, c.shape.kv_heads, c.shape.dim,
                                               KvDtype::kBF16));
    std::mt19937 rng(5 + c.batch + c.longest + c.shape.dim + c.shape.heads);
    const DecodeBatch b(c.shape, p(), c.window, contexts_for(c.batch, c.longest), rng);
    expect_matches_cpu_and_split(DecodeAttentionKernel::kStream, b, p(),
                                 std::string(precision_name(p())) + " " + describe(b));
  }
}

// Random batches: 1 to 256 sequences whose contexts are drawn uniformly from 1..longest
// (the pools stay under ~140M elements: fewer kv heads for the larger batches).
TEST_P(CudaDecodeAttentionStream, MatchesCpuAndSplitKernelOnRandomBatches) {
  struct RandomCase {
    Shape shape;
    int batch, longest, window;
  };
  const RandomCase cases[] = {
      {{32, 8, 128, 16}, 1, 4096, 0},   {{32, 8, 128, 16}, 7, 4096, 0},
      {{32, 8, 128, 16}, 12, 4096, 0},  {{8, 2, 128, 16}, 48, 4096, 0},
      {{8, 2, 128, 16}, 100, 2048, 0},  {{8, 2, 128, 16}, 256, 1024, 0},
      {{4, 1, 128, 16}, 256, 2048, 0},  {{16, 2, 64, 16}, 97, 4096, 0},
      {{8, 2, 128, 16}, 48, 4096, 700}, {{32, 4, 256, 16}, 9, 4096, 0},
      {{16, 2, 128, 7}, 40, 4096, 0},   {{6, 2, 64, 5}, 64, 2048, 0},
  };
  for (const RandomCase& c : cases) {
    std::mt19937 rng(101 + c.batch + c.longest + c.shape.dim);
    std::uniform_int_distribution<int> length(1, c.longest);
    std::vector<int> contexts(c.batch);
    for (int& x : contexts)
      x = length(rng);
    const DecodeBatch b(c.shape, p(), c.window, contexts, rng);
    expect_matches_cpu_and_split(DecodeAttentionKernel::kStream, b, p(),
                                 std::string(precision_name(p())) + " random " + describe(b));
  }
}

// However the launch cuts the contexts into parts (one part: the block folds its segments
// itself; several: segment records and the combine kernel), and whatever runs beside a token,
// its output has the same bits.
TEST_P(CudaDecodeAttentionStream, IsBitwiseTheSameForEveryCutAndBatch) {
  for (auto [shape, batch] :
       {std::pair{Shape{8, 2, 128, 16}, 24}, std::pair{Shape{6, 2, 64, 5}, 24},
        std::pair{Shape{2, 2, 256, 3}, 12}, std::pair{Shape{32, 4, 128, 16}, 12}}) {
    std::mt19937 rng(9 + shape.dim);
    const DecodeBatch b(shape, p(), 0, contexts_for(batch, 6000), rng);
    expect_bitwise_for_every_cut_and_batch(DecodeAttentionKernel::kStream, b,
                                           {0, 1, 5, 10, batch - 1});
  }
}

// A caller's segment (AttentionArgs::segment_keys: a tensor-parallel model's 128 keys, and 64)
// cuts the contexts finer and so rounds differently, and keeps every property of the
// default's: close to the CPU reference, the same bits for every cut and batch.
TEST_P(CudaDecodeAttentionStream, CallersSegmentIsBitwiseTheSameForEveryCutAndBatch) {
  EXPECT_EQ(detail::decode_stream_launch(32, 8, 128, 1, 512, KvDtype::kBF16, 128).segment_keys,
            128);
  EXPECT_EQ(detail::decode_stream_launch(32, 8, 128, 1, 512, KvDtype::kBF16, 0).segment_keys,
            detail::stream_segment_keys(0));
  EXPECT_EQ(detail::stream_segment_keys(100), detail::stream_segment_keys(0));  // not 64k
  for (const int seg : {128, 64}) {
    SCOPED_TRACE("segment " + std::to_string(seg));
    std::mt19937 rng(23 + seg);
    DecodeBatch b(Shape{8, 2, 128, 16}, p(), 0, contexts_for(24, 3000), rng);
    const auto queries = all_queries(b);
    const auto plain = b.run(DecodeAttentionKernel::kStream, 0, queries);
    b.segment_keys = seg;
    expect_bitwise_for_every_cut_and_batch(DecodeAttentionKernel::kStream, b, {0, 7, 23});
    expect_matches_cpu_and_split(DecodeAttentionKernel::kStream, b, p(),
                                 "segment " + std::to_string(seg) + " " + describe(b));
    if (detail::stream_segment_keys(0) != seg) {
      EXPECT_FALSE(b.run(DecodeAttentionKernel::kStream, 0, queries) == plain)
          << "the segment did not reach the kernel (same bits as the default's)";
    }
  }
}

// A decode step's CUDA graph is replayed while the contexts grow as long as
// decode_split_count stays the same (capped at 32 splits past 1984 positions): a launch
// captured at shorter contexts must still cover every segment of the longer ones, bitwise as a
// launch made for them.
TEST_P(CudaDecodeAttentionStream, CapturedLaunchStaysValidAsContextsGrow) {
  const Shape shape{8, 2, 128, 16};
  std::mt19937 rng(41);
  const DecodeBatch b(shape, p(), 0, contexts_for(12, 6000), rng);
  const int S = static_cast<int>(b.contexts.size()), NH = shape.heads, D = shape.dim;
  std::vector<std::int32_t> short_positions(b.positions);
  int short_max = 0;
  for (int& x : short_positions) {
    x = std::max(0, (x + 1) * 3 / 5 - 1);
    short_max = std::max(short_max, x + 1);
  }
  ASSERT_EQ(decode_split_count(short_max), decode_split_count(b.max_context()));
  const auto queries = all_queries(b);
  const auto want = b.run(DecodeAttentionKernel::kStream, 0, queries);

  set_decode_attention_kernel(DecodeAttentionKernel::kStream);
  set_decode_attention_parts(0);
  prepare_attention_kernels();
  auto pool = to_half(b.pool0, p(), nullptr);
  Dev<float> dq(b.q);
  Dev<std::int32_t> dpos(short_positions), dseq(b.token_seq), dpages(b.page_ids),
      dbegin(b.table_begin), dqueries(queries);
  Dev<Half> out(static_cast<std::size_t>(S) * NH * D);
  Dev<float> work(std::max<std::size_t>(1, decode_workspace_floats(S, NH, D, b.max_context())));
  FlatBatchView fb{dpos.get(), dseq.get(), dbegin.get(), dpages.get(), S};
  PagedKvView kv{
      pool->get(),
      p(),
      b.page_elems(),
      static_cast<std::size_t>(DecodeBatch::kLayer) * b.page_elems() / DecodeBatch::kLayers,
      shape.page_size,
      shape.kv_heads,
      D};
  AttentionArgs a;
  a.q = dq.get();
  a.q_stride = static_cast<std::size_t>(NH) * D;
  a.num_heads = NH;
  a.scale = 1.0f / std::sqrt(static_cast<float>(D));
  a.out = out.get();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  decode_attention(a, fb, kv, dqueries.get(), S, short_max, work.get(), stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  dpos.upload(b.positions);  // the contexts grew; the graph reads the positions at replay
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const auto got = out.download();
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  EXPECT_TRUE(got == want) << describe(b) << ": the replayed launch differs";
}

TEST_P(CudaDecodeAttentionStream, WithRopeIsBitwiseRopeStoreKvThenAttention) {
  expect_rope_fusion_is_bitwise(DecodeAttentionKernel::kStream, p());
}

// Shapes the streaming kernel does not serve (more than 8 heads per kv head, other head
// dims) keep their kernels when it is selected; int8/fp8 pages of its shapes it serves
// (cuda_kv_quant_test.cpp checks them).
TEST_P(CudaDecodeAttentionStream, OtherShapesKeepTheirKernels) {
  EXPECT_TRUE(detail::decode_stream_supports(32, 8, 128, KvDtype::kInt8));
  EXPECT_TRUE(detail::decode_stream_supports(32, 8, 128, KvDtype::kFp8E4M3));
  EXPECT_FALSE(detail::decode_stream_supports(16, 1, 128, KvDtype::kInt8));
  for (const Shape& shape : {Shape{16, 1, 64, 16}, Shape{8, 1, 32, 7}}) {
    EXPECT_FALSE(
        detail::decode_stream_supports(shape.heads, shape.kv_heads, shape.dim, KvDtype::kBF16));
    expect_same_as_split(DecodeAttentionKernel::kStream, shape, p(), 31 + shape.dim);
  }
}

// The launch plan for Llama-3-8B's shape: a ring of at least two stages, at least one block per
// SM, and a grid that never has fewer blocks than the device holds at once where the batch
// has enough (token, kv head) pairs to fill it.
TEST_P(CudaDecodeAttentionStream, LaunchFillsTheDevice) {
  const DeviceList list = visible_devices();
  const int sms = list.devices.empty() ? 132 : list.devices[0].multiprocessors;
  for (int batch : {1, 8, 64, 256, 512}) {
    for (int context : {512, 2048, 4096}) {
      const auto plan = detail::decode_stream_launch(32, 8, 128, batch, context);
      const std::string what =
          "batch " + std::to_string(batch) + " context " + std::to_string(context);
      EXPECT_GE(plan.stages, 2) << what;
      EXPECT_GE(plan.blocks_per_sm, 1) << what;
      EXPECT_GE(plan.parts, 1) << what;
      EXPECT_EQ(plan.segment_keys % 64, 0) << what;
      const long long blocks = 8LL * batch * plan.parts;
      const long long segments = (context + plan.segment_keys - 1) / plan.segment_keys;
      if (8LL * batch * segments >= static_cast<long long>(sms) * plan.blocks_per_sm) {
        EXPECT_GE(blocks, static_cast<long long>(sms) * plan.blocks_per_sm / 2) << what;
      }
    }
  }
}

TEST(DecodeAttentionKernel, StreamNameAndGraphKey) {
  const DecodeAttentionKernel before = decode_attention_kernel();
  set_decode_attention_kernel(DecodeAttentionKernel::kSplit);
  const int split_key = decode_split_count(700);
  set_decode_attention_kernel(DecodeAttentionKernel::kPipelined);
  const int pipelined_key = decode_split_count(700);
  set_decode_attention_kernel(DecodeAttentionKernel::kStream);
  EXPECT_EQ(decode_attention_kernel(), DecodeAttentionKernel::kStream);
  EXPECT_NE(decode_split_count(700), split_key);
  EXPECT_NE(decode_split_count(700), pipelined_key);
  EXPECT_STREQ(decode_attention_kernel_name(DecodeAttentionKernel::kStream), "stream");
  set_decode_attention_kernel(before);
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaDecodeAttentionStream,
                         ::testing::Values(Precision::kBF16, Precision::kF16),
                         [](const ::testing::TestParamInfo<Precision>& param) {
                           return std::string(precision_name(param.param));
                         });

}  // namespace
}  // namespace weft::cuda
