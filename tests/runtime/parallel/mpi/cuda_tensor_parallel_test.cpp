// Run under `mpirun -np 2` on a machine with two GPUs (tests/runtime/CMakeLists.txt): every
// fixture model split over the ranks, one GPU each (the CudaModel all-reducing over NCCL on
// its stream), against the whole model on one GPU. Skips with fewer GPUs than ranks.
//
// Each rank runs the whole model on its own GPU as the reference, then its shard. The steps:
// a prefill of two sequences (every row's logits), then decode steps of both together, which
// replay CUDA graphs with the all-reduces captured in them. Both runs are fed the whole
// model's greedy tokens, so they stay on the same sequence.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loaders/model_loader.hpp"
#include "runtime/model/cuda/cuda_model.hpp"
#include "runtime/parallel/mpi_communicator.hpp"
#include "runtime/parallel/nccl_communicator.hpp"
#include "tests/runtime/parallel/mpi/mpi_gtest_main.hpp"

namespace weft {
namespace {

parallel::Communicator* g_world = nullptr;

// max |split - whole| / max |whole| over a step's logit rows. Both runs round weights and
// activations to 16 bits between kernels; the split's products sum over half the heads or
// half the MLP slice and NCCL adds the two fp32 partial sums, so a 16-bit rounding of an
// activation can land on the other side: the error is of the order of the GPU's against the
// fp32 reference (at most 0.016 in bf16 and 0.0014 in fp16 measured, docs/cuda.md), and the
// bounds are the GPU model tests' (tests/runtime/model/cuda/cuda_model_test.cpp).
double tolerance(cuda::Precision p) {
  return p == cuda::Precision::kBF16 ? 0.03 : 0.004;
}

// The source tree: $WEFT_TEST_SOURCE_DIR when set (binaries built on one machine and run from
// a checkout on another, bench/gpu_tp.sh), else where this was built from.
std::filesystem::path source_dir() {
  if (const char* env = std::getenv("WEFT_TEST_SOURCE_DIR"); env != nullptr && *env != '\0') {
    return env;
  }
  return WEFT_SOURCE_DIR;
}

int local_gpu(int rank, int gpus) {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  return (local != nullptr ? std::atoi(local) : rank) % gpus;
}

class CudaTensorParallel
    : public ::testing::TestWithParam<std::tuple<const char*, cuda::Precision, int>> {};

// How the group runs a step (set_tensor_parallel's switches): the head split over the ranks'
// vocabulary (the default); the whole head on every rank; split, and o's and down's outputs
// all-reduced as bf16 from one token on (bf16 models only); then the split head with the
// collectives' buffers in NCCL symmetric windows (the head's gather in one for steps of up to
// 2 rows: decode steps, while the 12-row prefill gathers in plain memory), the same with bf16
// all-reduces, and in registered buffers (WEFT_TP_NCCL_BUFFERS); then the all-reduces fused
// with the add_norm after them (WEFT_TP_FUSED_NORM=1, kernels/cuda/tp_fused.hpp) on every
// step, and on the decode steps only (WEFT_TP_FUSED_ROWS=2: the 12-row prefill goes through
// NCCL's all-reduce, so the two paths alternate on the same residual stream).
enum Mode {
  kVocabSplit = 0,
  kWholeHead = 1,
  kBf16Reduce = 2,
  kSymmetric = 3,
  kSymmetricBf16 = 4,
  kRegistered = 5,
  kFused = 6,
  kFusedDecode = 7,
  kQuantized = 8  // q8_b32: each rank quantizes its shard, against the whole quantized model
};

TEST_P(CudaTensorParallel, SplitOverTwoGpusMatchesOneGpu) {
  auto& w = *g_world;
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < 2 || w.size() < 2) {
    cudaGetLastError();
    GTEST_SKIP() << "needs two GPUs and mpirun -np 2 or more (have " << gpus << " GPUs, "
                 << w.size() << " ranks): run on a multi-GPU machine (bench/gpu_tp.sh)";
  }
  const auto& [name, precision, mode] = GetParam();
  const bool reduce16 = mode == kBf16Reduce || mode == kSymmetricBf16;
  if (reduce16 && precision != cuda::Precision::kBF16) {
    GTEST_SKIP() << "bf16 all-reduces are for bf16 models";
  }
  const char* buffers = mode == kSymmetric || mode == kSymmetricBf16 ? "symmetric"
                        : mode == kRegistered                        ? "registered"
                                                                     : "plain";
  const bool split_vocab = mode != kWholeHead;
  const bool fused = mode == kFused || mode == kFusedDecode;
  const int device = local_gpu(w.rank(), gpus);
  const auto dir = source_dir() / "tests/fixtures/models" / name;
  LoadOptions whole_options;
  if (mode == kQuantized) whole_options.quantize = quant::QuantType::kQ8B32;
  auto whole = load_model(dir, whole_options);
  ASSERT_TRUE(whole) << whole.error().what();
  LoadOptions options = whole_options;
  options.tensor_parallel_size = w.size();
  options.tensor_parallel_rank = w.rank();
  auto shard = load_model(dir, options);
  ASSERT_TRUE(shard) << shard.error().what();
  const int vocab = whole->model.spec().vocab_size;

  model::CudaModelOptions o;
  o.device = device;
  o.precision = precision;
  o.page_size = 4;
  o.num_pages = 64;
  o.max_tokens_per_step = 32;
  auto one = model::CudaModel::create(whole->model, o);
  ASSERT_TRUE(one) << one.error().what();
  auto made = model::CudaModel::create(shard->model, o);
  ASSERT_TRUE(made) << made.error().what();
  std::optional<model::CudaModel> part(std::move(made.value()));
  // Each rank's pool holds only its kv heads (one replicated head with fewer kv heads than
  // ranks).
  EXPECT_EQ(part->kv_layout().num_kv_heads,
            std::max(1, whole->model.spec().num_kv_heads / w.size()));
  auto nccl = parallel::make_nccl_communicator(w, device, part->cuda_stream());
  ASSERT_TRUE(nccl) << nccl.error().what();
  // Read by set_tensor_parallel.
  setenv("WEFT_TP_VOCAB_PARALLEL", split_vocab ? "1" : "0", 1);
  setenv("WEFT_TP_BF16_REDUCE_TOKENS", reduce16 ? "1" : "0", 1);  // unset: from 128 tokens
  setenv("WEFT_TP_NCCL_BUFFERS", buffers, 1);
  setenv("WEFT_TP_NCCL_HEAD_ROWS", "2", 1);
  setenv("WEFT_TP_FUSED_NORM", fused ? "1" : "0", 1);
  if (mode == kFusedDecode) setenv("WEFT_TP_FUSED_ROWS", "2", 1);
  auto joined = part->set_tensor_parallel(**nccl);
  unsetenv("WEFT_TP_FUSED_NORM");
  unsetenv("WEFT_TP_FUSED_ROWS");
  unsetenv("WEFT_TP_VOCAB_PARALLEL");
  unsetenv("WEFT_TP_BF16_REDUCE_TOKENS");
  unsetenv("WEFT_TP_NCCL_BUFFERS");
  unsetenv("WEFT_TP_NCCL_HEAD_ROWS");
  ASSERT_TRUE(joined) << joined.error().what();
  EXPECT_EQ(part->vocab_parallel_head(), split_vocab);
  EXPECT_EQ(part->bf16_reduce_tokens(), reduce16 ? 1 : 0);
  const std::string how = part->tensor_parallel_buffers();
  if (std::string(buffers) == "plain") {
    EXPECT_EQ(how, "plain device memory");
  }
  const std::string fused_how = part->fused_norm();
  if (fused) {
    // Where this NCCL has no device API the group falls back and says why; a failed check of
    // the kernel on this machine is a failure.
    EXPECT_EQ(fused_how.find("check on this machine failed"), std::string::npos) << fused_how;
    if (part->fused_norm_tokens() == 0) {
      if (w.rank() == 0) std::cout << "[ measured ] fused norm " << fused_how << "\n";
      part.reset();
      nccl->reset();
      GTEST_SKIP() << "fused norm " << fused_how;
    }
    // WEFT_TP_FUSED_ROWS unset: 256 rows for two ranks, 64 for more, at most a step's tokens.
    const int rows = std::min(w.size() == 2 ? 256 : 64, o.max_tokens_per_step);
    EXPECT_EQ(part->fused_norm_tokens(), mode == kFusedDecode ? 2 : rows) << fused_how;
  } else {
    EXPECT_EQ(part->fused_norm_tokens(), 0) << fused_how;
  }

  // Two sequences: 7 and 5 prompt tokens, pages 0-7 and 8-15 (the same ids in both pools).
  const std::vector<std::vector<std::int32_t>> prompts = {{5, 17, 42, 99, 3, 201, 64},
                                                          {7, 300, 12, 8, 150}};
  model::StepBatch step;
  for (std::size_t s = 0; s < prompts.size(); ++s) {
    const int begin = static_cast<int>(step.tokens.size());
    std::vector<std::int32_t> pages;
    for (int p = 0; p < 8; ++p)
      pages.push_back(static_cast<std::int32_t>(s * 8 + p));
    for (std::size_t i = 0; i < prompts[s].size(); ++i) {
      step.tokens.push_back(prompts[s][i] % vocab);
      step.positions.push_back(static_cast<int>(i));
    }
    step.sequences.push_back({begin, static_cast<int>(prompts[s].size()), pages, true});
  }
  const double tol = tolerance(precision);
  double worst = 0;
  int checked = 0, near_ties = 0;
  std::vector<float> want, got;
  for (int k = 0; k < 8; ++k) {  // the prefill, then 7 decode steps (graphs after the first)
    auto ok = one->forward(step, want);
    ASSERT_TRUE(ok) << ok.error().what();
    ok = part->forward(step, got);
    ASSERT_TRUE(ok) << ok.error().what();
    ASSERT_EQ(got.size(), want.size());
    const std::size_t rows = want.size() / static_cast<std::size_t>(vocab);
    float max_ref = 0, max_err = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      max_ref = std::max(max_ref, std::fabs(want[i]));
      max_err = std::max(max_err, std::fabs(got[i] - want[i]));
    }
    ASSERT_TRUE(std::isfinite(max_err)) << name << " step " << k;
    const double e = max_ref > 0 ? max_err / max_ref : max_err;
    worst = std::max(worst, e);
    EXPECT_LE(e, tol) << name << " step " << k << " rank " << w.rank();
    // Greedy tokens of each sequence's last row: the same as one GPU's, unless one GPU's best
    // two are closer than the error bound allows to tell apart.
    model::StepBatch next;
    std::size_t row = 0;
    for (std::size_t s = 0; s < step.sequences.size(); ++s) {
      const auto& seq = step.sequences[s];
      row += static_cast<std::size_t>(seq.all_logits ? seq.token_count : 1);
      const float* a = want.data() + (row - 1) * static_cast<std::size_t>(vocab);
      const float* b = got.data() + (row - 1) * static_cast<std::size_t>(vocab);
      const auto best = static_cast<int>(std::max_element(a, a + vocab) - a);
      float second = -INFINITY;
      for (int v = 0; v < vocab; ++v)
        if (v != best) second = std::max(second, a[v]);
      if (a[best] - second > 2 * tol * max_ref) {
        EXPECT_EQ(std::max_element(b, b + vocab) - b, best)
            << name << " step " << k << " sequence " << s;
        ++checked;
      } else {
        ++near_ties;
      }
      const int pos =
          step.positions[static_cast<std::size_t>(seq.token_begin + seq.token_count - 1)] + 1;
      next.tokens.push_back(best);
      next.positions.push_back(pos);
      next.sequences.push_back({static_cast<int>(s), 1, seq.page_table, false});
    }
    ASSERT_EQ(row, rows);
    step = std::move(next);
  }
  part.reset();  // the model (and its graphs) before its communicator
  nccl->reset();
  if (w.rank() == 0) {
    std::cout << "[ measured ] " << name << " " << cuda::precision_name(precision)
              << (split_vocab ? " vocab-parallel head" : " whole head")
              << (reduce16 ? ", bf16 all-reduces" : "") << ", buffers: " << how
              << ", fused norm: " << fused_how << " over 2 GPUs: worst relative logit error "
              << worst << " (tolerance " << tol << "); greedy tokens checked " << checked
              << ", near ties skipped " << near_ties << "\n";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, CudaTensorParallel,
    ::testing::Combine(::testing::Values("llama_gqa_f32", "llama_dynamic_sharded_f32",
                                         "llama_linear_headdim_bias_f16",
                                         "llama_mqa_tied_llama3_bf16", "mistral_swa_bf16",
                                         "qwen2_tied_f32", "qwen2_yarn_bf16"),
                       ::testing::Values(cuda::Precision::kBF16, cuda::Precision::kF16),
                       ::testing::Values(kVocabSplit, kWholeHead, kBf16Reduce)));
// The collectives' buffers in NCCL's memory: symmetric windows on every fixture, registered
// buffers on two.
INSTANTIATE_TEST_SUITE_P(
    SymmetricBuffers, CudaTensorParallel,
    ::testing::Combine(::testing::Values("llama_gqa_f32", "llama_dynamic_sharded_f32",
                                         "llama_linear_headdim_bias_f16",
                                         "llama_mqa_tied_llama3_bf16", "mistral_swa_bf16",
                                         "qwen2_tied_f32", "qwen2_yarn_bf16"),
                       ::testing::Values(cuda::Precision::kBF16, cuda::Precision::kF16),
                       ::testing::Values(kSymmetric, kSymmetricBf16)));
// The fused all-reduce and norm: every fixture on every step, two with decode steps only.
INSTANTIATE_TEST_SUITE_P(
    FusedNorm, CudaTensorParallel,
    ::testing::Combine(::testing::Values("llama_gqa_f32", "llama_dynamic_sharded_f32",
                                         "llama_linear_headdim_bias_f16",
                                         "llama_mqa_tied_llama3_bf16", "mistral_swa_bf16",
                                         "qwen2_tied_f32", "qwen2_yarn_bf16"),
                       ::testing::Values(cuda::Precision::kBF16, cuda::Precision::kF16),
                       ::testing::Values(kFused)));
INSTANTIATE_TEST_SUITE_P(FusedNormDecodeOnly, CudaTensorParallel,
                         ::testing::Combine(::testing::Values("llama_gqa_f32", "qwen2_tied_f32"),
                                            ::testing::Values(cuda::Precision::kBF16),
                                            ::testing::Values(kFusedDecode)));
// Quantized weights (docs/quantization.md): each rank's shard quantized by the loader, against
// the whole model quantized on one GPU (a shard row shorter than a block ends in a short block,
// rounded a little differently: within the same tolerance).
INSTANTIATE_TEST_SUITE_P(
    Quantized, CudaTensorParallel,
    ::testing::Combine(::testing::Values("llama_gqa_f32", "qwen2_tied_f32", "mistral_swa_bf16"),
                       ::testing::Values(cuda::Precision::kBF16), ::testing::Values(kQuantized)));
INSTANTIATE_TEST_SUITE_P(RegisteredBuffers, CudaTensorParallel,
                         ::testing::Combine(::testing::Values("llama_gqa_f32", "qwen2_tied_f32"),
                                            ::testing::Values(cuda::Precision::kBF16),
                                            ::testing::Values(kRegistered)));

// The fused norm's switches are read when a rank joins, before anything changes: a value that
// is not 0 or 1, a row count out of range, and ranks that disagree (one without mpirun -x) are
// refused on every rank with the variable named; the model then joins as asked.
TEST(CudaTensorParallelSwitches, FusedNormSwitchesAreCheckedOnEveryRank) {
  auto& w = *g_world;
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < 2 || w.size() < 2) {
    cudaGetLastError();
    GTEST_SKIP() << "needs two GPUs and mpirun -np 2 or more (have " << gpus << " GPUs)";
  }
  const int device = local_gpu(w.rank(), gpus);
  LoadOptions options;
  options.tensor_parallel_size = w.size();
  options.tensor_parallel_rank = w.rank();
  auto shard = load_model(source_dir() / "tests/fixtures/models/llama_gqa_f32", options);
  ASSERT_TRUE(shard) << shard.error().what();
  model::CudaModelOptions o;
  o.device = device;
  o.page_size = 4;
  o.num_pages = 16;
  o.max_tokens_per_step = 8;
  auto made = model::CudaModel::create(shard->model, o);
  ASSERT_TRUE(made) << made.error().what();
  std::optional<model::CudaModel> part(std::move(made.value()));
  auto nccl = parallel::make_nccl_communicator(w, device, part->cuda_stream());
  ASSERT_TRUE(nccl) << nccl.error().what();
  auto refused = [&](const char* norm, const char* rows, const char* named) {
    setenv("WEFT_TP_FUSED_NORM", norm, 1);
    if (rows != nullptr) setenv("WEFT_TP_FUSED_ROWS", rows, 1);
    auto joined = part->set_tensor_parallel(**nccl);
    unsetenv("WEFT_TP_FUSED_NORM");
    unsetenv("WEFT_TP_FUSED_ROWS");
    ASSERT_FALSE(joined) << norm;
    EXPECT_EQ(joined.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(joined.error().what()).find(named), std::string::npos)
        << joined.error().what();
  };
  refused("yes", nullptr, "WEFT_TP_FUSED_NORM: 'yes'");
  refused("1", "0", "WEFT_TP_FUSED_ROWS: '0'");
  refused("1", "257", "WEFT_TP_FUSED_ROWS: '257'");
  refused("1", "-1", "WEFT_TP_FUSED_ROWS: '-1'");
  refused("1", "8x", "WEFT_TP_FUSED_ROWS: '8x'");
  refused(w.rank() == 0 ? "1" : "0", nullptr, "differ across the tensor-parallel ranks");
  // Rows of 8 on rank 0, 24 on rank 1, 16 on the others: with three ranks or more the others
  // hold the mean, which a comparison of the sums alone let pass there.
  refused("1",
          w.rank() == 0   ? "8"
          : w.rank() == 1 ? "24"
                          : "16",
          "differ across the tensor-parallel ranks");
  // Unset, the fused path is on for groups of two and four ranks (up to the model's 8 tokens a
  // step here) and off for other sizes.
  auto joined = part->set_tensor_parallel(**nccl);
  ASSERT_TRUE(joined) << joined.error().what();
  const bool by_default = w.size() == 2 || w.size() == 4;
  EXPECT_EQ(part->fused_norm_tokens(), by_default ? 8 : 0) << part->fused_norm();
  EXPECT_EQ(part->fused_norm().rfind(by_default ? "on" : "off", 0), 0u) << part->fused_norm();
  part.reset();
  nccl->reset();
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  return weft::test_support::mpi_gtest_main(argc, argv, weft::g_world);
}
