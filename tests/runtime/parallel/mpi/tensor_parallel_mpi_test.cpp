// Run under `mpirun -np 2` (tests/runtime/CMakeLists.txt): the MPI communicator's collectives,
// and every fixture model split over the ranks against the whole model in one process.
// Greedy tokens must match exactly; logits within kTolerance (see below).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "kernels/cpu/vector_math.hpp"
#include "loaders/model_loader.hpp"
#include "runtime/parallel/mpi_communicator.hpp"
#include "tests/runtime/parallel/mpi/mpi_gtest_main.hpp"

namespace weft {
namespace {

parallel::Communicator* g_world = nullptr;

TEST(MpiCommunicator, ReducesGathersAndBroadcasts) {
  auto& w = *g_world;
  const int r = w.rank(), n = w.size();
  ASSERT_GE(n, 2) << "run this test under mpirun -np 2 or more";
  std::vector<float> sum = {1.0f * (r + 1), -2.0f, 0.5f * r};
  ASSERT_TRUE(w.all_reduce_sum(sum));
  EXPECT_EQ(sum[0], n * (n + 1) / 2.0f);
  EXPECT_EQ(sum[1], -2.0f * n);
  EXPECT_EQ(sum[2], 0.25f * n * (n - 1));

  std::vector<std::uint16_t> half = {cpu::f32_to_bf16(1.5f), cpu::f32_to_bf16(-0.25f * (r + 1))};
  ASSERT_TRUE(w.all_reduce_sum_bf16(half));
  EXPECT_EQ(cpu::bf16_to_f32(half[0]), 1.5f * n);
  EXPECT_EQ(cpu::bf16_to_f32(half[1]), -0.25f * n * (n + 1) / 2.0f);

  const std::vector<float> mine = {10.0f * r, 10.0f * r + 1};
  std::vector<float> all(2 * static_cast<std::size_t>(n));
  ASSERT_TRUE(w.all_gather(mine, all));
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(all[2 * k], 10.0f * k);
    EXPECT_EQ(all[2 * k + 1], 10.0f * k + 1);
  }
  std::vector<float> short_output(1);
  auto bad = w.all_gather(mine, short_output);  // checked before any rank sends
  ASSERT_FALSE(bad);
  EXPECT_NE(std::string(bad.error().what()).find("mpi all_gather"), std::string::npos);

  std::int32_t token[2] = {r == 1 ? 77 : -1, r == 1 ? 1 : 0};
  ASSERT_TRUE(w.broadcast(std::as_writable_bytes(std::span<std::int32_t>(token)), 1));
  EXPECT_EQ(token[0], 77);
  EXPECT_EQ(token[1], 1);
  EXPECT_FALSE(w.broadcast({}, n));  // no such root
  EXPECT_TRUE(w.barrier());
}

// The shard reduces partial sums in another order than the whole model adds them: fp32
// rounding differs by a few ulps per layer. Bound: |shard - whole| <= 1e-5 * max|whole|;
// measured on the fixtures (2 ranks, 6 steps each): at most 3.7e-7 * max|whole|.
constexpr float kTolerance = 1e-5f;

class TensorParallelFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(TensorParallelFixture, MatchesTheWholeModel) {
  auto& w = *g_world;
  const auto dir = std::filesystem::path(WEFT_SOURCE_DIR) / "tests/fixtures/models" / GetParam();
  auto whole = load_model(dir);
  ASSERT_TRUE(whole) << whole.error().what();
  LoadOptions options;
  options.tensor_parallel_size = w.size();
  options.tensor_parallel_rank = w.rank();
  auto shard = load_model(dir, options);
  ASSERT_TRUE(shard) << shard.error().what();
  const auto& full_spec = whole->model.spec();
  const auto& part_spec = shard->model.spec();
  EXPECT_EQ(part_spec.num_heads * w.size(), full_spec.num_heads);
  EXPECT_EQ(part_spec.intermediate_size * w.size(), full_spec.intermediate_size);
  // Each rank's KV pool holds only its kv heads (one replicated head when there are fewer
  // kv heads than ranks).
  EXPECT_EQ(part_spec.num_kv_heads, std::max(1, full_spec.num_kv_heads / w.size()));
  EXPECT_EQ(shard->full_spec.num_heads, full_spec.num_heads);

  const int page_size = 4, vocab = full_spec.vocab_size;
  model::KvCache kv_whole(whole->model.kv_layout(page_size), 8);
  model::KvCache kv_shard(shard->model.kv_layout(page_size), 8);
  cpu::ThreadPool pool(1);
  const std::vector<std::int32_t> prompt = {5, 17, 42, 99, 3, 201, 64};
  model::StepBatch step;
  step.tokens = prompt;
  for (int i = 0; i < static_cast<int>(prompt.size()); ++i)
    step.positions.push_back(i);
  step.sequences.push_back({0, static_cast<int>(prompt.size()), {0, 1, 2, 3, 4, 5, 6, 7}, true});
  std::vector<float> want, got;
  for (int s = 0; s < 6; ++s) {  // prefill with every row's logits, then 5 decode steps
    ASSERT_TRUE(whole->model.forward(step, kv_whole, want, pool));
    auto ok = shard->model.forward(step, kv_shard, got, pool, cpu::KernelPath::kAuto, &w);
    ASSERT_TRUE(ok) << ok.error().what();
    ASSERT_EQ(got.size(), want.size());
    float max_ref = 0, max_err = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      max_ref = std::max(max_ref, std::fabs(want[i]));
      max_err = std::max(max_err, std::fabs(got[i] - want[i]));
    }
    EXPECT_LE(max_err, kTolerance * max_ref)
        << GetParam() << " step " << s << " rank " << w.rank() << ": max |error| " << max_err
        << ", max |logit| " << max_ref;
    const float* last_want = want.data() + want.size() - static_cast<std::size_t>(vocab);
    const float* last_got = got.data() + got.size() - static_cast<std::size_t>(vocab);
    const auto greedy =
        static_cast<std::int32_t>(std::max_element(last_want, last_want + vocab) - last_want);
    EXPECT_EQ(std::max_element(last_got, last_got + vocab) - last_got, greedy)
        << GetParam() << " step " << s;
    const int pos = step.positions.back() + 1;
    step.tokens = {greedy};
    step.positions = {pos};
    step.sequences[0].token_begin = 0;
    step.sequences[0].token_count = 1;
    step.sequences[0].all_logits = false;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallelFixture,
                         ::testing::Values("llama_gqa_f32", "llama_dynamic_sharded_f32",
                                           "llama_linear_headdim_bias_f16",
                                           "llama_mqa_tied_llama3_bf16", "mistral_swa_bf16",
                                           "qwen2_tied_f32", "qwen2_yarn_bf16"));

TEST(TensorParallelLoad, RefusesAGroupTheHeadsDoNotDivide) {
  const auto dir = std::filesystem::path(WEFT_SOURCE_DIR) / "tests/fixtures/models/llama_gqa_f32";
  LoadOptions options;
  options.tensor_parallel_size = 3;
  options.tensor_parallel_rank = 0;
  auto loaded = load_model(dir, options);
  ASSERT_FALSE(loaded);
  EXPECT_NE(std::string(loaded.error().what()).find("num_heads (4) is not divisible by"),
            std::string::npos)
      << loaded.error().what();
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  return weft::test_support::mpi_gtest_main(argc, argv, weft::g_world);
}
