// The pipelined decode attention (DecodeAttentionKernel::kPipelined, kernels/cuda/
// decode_attention.cu) against the per-split kernel and cpu::paged_attention: batches of
// sequences with contexts that are not page multiples (one to several splits, splits of more
// than one tile), GQA ratios 1, 3, 4 and 8, head dims 64, 128 and 256, page tables shuffled
// out of a shared pool, with and without a sliding window, bf16 and fp16. Also: its result
// is bitwise the same for every cut into parts and for a token alone or in a batch (batch
// invariance), and with the rotary embedding applied in the kernel it is bitwise
// rope_store_kv followed by the kernel. Skips without a GPU.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/paged_attention.hpp"
#include "kernels/cuda/convert.hpp"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/rope.hpp"
#include "tests/kernels/cuda_test_buffer.hpp"
#include "tests/kernels/decode_attention_batch.hpp"

namespace weft::cuda {
namespace {

TEST_P(CudaDecodeAttention, PipelinedMatchesCpuAndSplitKernel) {
  // Llama-3-8B's heads (GQA 4), GQA 1, 3 and 8, head dims 64, 128 and 256; the pools stay
  // under ~30M elements.
  const Case cases[] = {
      {{32, 8, 128, 16}, 1, 1300, 0},   {{32, 8, 128, 16}, 16, 700, 0},
      {{32, 8, 128, 16}, 3, 2100, 300}, {{2, 2, 128, 5}, 12, 6000, 0},
      {{2, 2, 128, 5}, 3, 700, 100},    {{16, 2, 128, 16}, 37, 2100, 0},
      {{16, 2, 128, 16}, 4, 6000, 0},   {{6, 2, 64, 3}, 37, 2100, 0},
      {{6, 2, 64, 3}, 24, 6000, 1000},  {{2, 2, 256, 16}, 4, 6000, 0},
      {{32, 4, 128, 7}, 8, 2100, 0},
  };
  for (const Case& c : cases) {
    ASSERT_TRUE(decode_attention_applies_rope(c.shape.heads, c.shape.kv_heads, c.shape.dim));
    std::mt19937 rng(3 + c.batch + c.longest + c.shape.dim + c.shape.heads);
    const DecodeBatch b(c.shape, p(), c.window, contexts_for(c.batch, c.longest), rng);
    // The two kernels differ only in how the splits are combined (fp32 rounding).
    expect_matches_cpu_and_split(DecodeAttentionKernel::kPipelined, b, p(),
                                 std::string(precision_name(p())) + " " + describe(b));
  }
}

// However the launch cuts the contexts into parts (one part: the block folds its splits
// itself; several: split records and the combine kernel), and whatever runs beside a token,
// its output has the same bits.
TEST_P(CudaDecodeAttention, PipelinedIsBitwiseTheSameForEveryCutAndBatch) {
  for (auto [shape, batch] :
       {std::pair{Shape{8, 2, 128, 16}, 24}, std::pair{Shape{6, 2, 64, 5}, 24},
        std::pair{Shape{2, 2, 256, 3}, 12}}) {
    std::mt19937 rng(7 + shape.dim);
    const DecodeBatch b(shape, p(), 0, contexts_for(batch, 4100), rng);
    expect_bitwise_for_every_cut_and_batch(DecodeAttentionKernel::kPipelined, b,
                                           {0, 5, 10, batch - 1});
  }
}

// With AttentionArgs::rope_inv_freq the pipelined kernel rotates q and the token's key and
// stores its key and value: bitwise rope_store_kv followed by the kernel, outputs and pages,
// for tokens whose own position is in a first tile, a later tile and a later part.
TEST_P(CudaDecodeAttention, PipelinedWithRopeIsBitwiseRopeStoreKvThenAttention) {
  expect_rope_fusion_is_bitwise(DecodeAttentionKernel::kPipelined, p());
}

// Shapes the pipelined kernel does not serve (int8/fp8 pages, more than 8 heads per kv head,
// other head dims) keep their kernels when it is selected: same bits as with the per-split
// choice.
TEST_P(CudaDecodeAttention, OtherShapesKeepTheirKernels) {
  for (const Shape& shape : {Shape{16, 1, 64, 16}, Shape{8, 1, 32, 7}})
    expect_same_as_split(DecodeAttentionKernel::kPipelined, shape, p(), 29 + shape.dim);
}

TEST(DecodeAttentionKernel, NamesAndSelection) {
  const DecodeAttentionKernel before = decode_attention_kernel();
  const int split_key = [] {
    set_decode_attention_kernel(DecodeAttentionKernel::kSplit);
    return decode_split_count(700);
  }();
  set_decode_attention_kernel(DecodeAttentionKernel::kPipelined);
  EXPECT_EQ(decode_attention_kernel(), DecodeAttentionKernel::kPipelined);
  // A graph captured with one kernel must not be replayed for the other.
  EXPECT_NE(decode_split_count(700), split_key);
  EXPECT_STREQ(decode_attention_kernel_name(DecodeAttentionKernel::kPipelined), "new");
  EXPECT_STREQ(decode_attention_kernel_name(DecodeAttentionKernel::kSplit), "old");
  set_decode_attention_kernel(before);
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaDecodeAttention,
                         ::testing::Values(Precision::kBF16, Precision::kF16),
                         [](const ::testing::TestParamInfo<Precision>& param) {
                           return std::string(precision_name(param.param));
                         });

}  // namespace
}  // namespace weft::cuda
