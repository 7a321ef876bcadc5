// Run under `mpirun -np 2` (tests/runtime/CMakeLists.txt): point-to-point messages and splits of
// the MPI communicator, and every fixture model cut into two pipeline stages, one per rank,
// with two micro-batches in flight, against the whole model in one process.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "loaders/model_loader.hpp"
#include "runtime/parallel/mpi_communicator.hpp"
#include "runtime/parallel/pipeline_backend.hpp"
#include "tests/runtime/parallel/mpi/mpi_gtest_main.hpp"

namespace weft {
namespace {

parallel::Communicator* g_world = nullptr;

template <class T>
std::span<std::byte> bytes(std::vector<T>& v) {
  return std::as_writable_bytes(std::span<T>(v));
}

TEST(MpiPointToPoint, SendsInOrderAndChecksSizes) {
  auto& w = *g_world;
  ASSERT_EQ(w.size(), 2) << "run under mpirun -np 2";
  const int peer = 1 - w.rank();
  // Both ranks send two messages before receiving: sends do not wait for the receiver.
  std::vector<float> first = {1.0f + w.rank(), 2.0f}, second = {3.0f, 4.0f, 5.0f + w.rank()};
  ASSERT_TRUE(w.send(bytes(first), peer));
  first[0] = -1;  // the communicator sent a copy
  ASSERT_TRUE(w.send(bytes(second), peer));
  std::vector<float> a(2), b(3);
  ASSERT_TRUE(w.recv(bytes(a), peer));
  ASSERT_TRUE(w.recv(bytes(b), peer));
  EXPECT_EQ(a, (std::vector<float>{1.0f + peer, 2.0f}));
  EXPECT_EQ(b, (std::vector<float>{3.0f, 4.0f, 5.0f + peer}));
  EXPECT_TRUE(w.wait_sends());
  EXPECT_FALSE(w.send(bytes(a), 2));  // no such rank
  // A receive shorter than the message is an error, not a truncation.
  std::vector<float> three(3, 7.0f), two(2);
  if (w.rank() == 0) ASSERT_TRUE(w.send(bytes(three), 1));
  if (w.rank() == 1) {
    auto cut = w.recv(bytes(two), 0);
    EXPECT_FALSE(cut);
  }
  EXPECT_TRUE(w.wait_sends());
  EXPECT_TRUE(w.barrier());
}

TEST(MpiPointToPoint, SplitsIntoGroups) {
  auto& w = *g_world;
  // One group per rank, then the whole world again under a new communicator.
  auto alone = w.split(w.rank(), 0);
  ASSERT_TRUE(alone) << alone.error().what();
  EXPECT_EQ((*alone)->size(), 1);
  EXPECT_EQ((*alone)->rank(), 0);
  std::vector<float> v = {2.0f};
  ASSERT_TRUE((*alone)->all_reduce_sum(v));
  EXPECT_EQ(v[0], 2.0f);
  auto both = w.split(0, -w.rank());  // key reverses the order
  ASSERT_TRUE(both) << both.error().what();
  EXPECT_EQ((*both)->size(), 2);
  EXPECT_EQ((*both)->rank(), 1 - w.rank());
  ASSERT_TRUE((*both)->all_reduce_sum(v));
  EXPECT_EQ(v[0], 4.0f);
}

// Micro-batches run the products over fewer rows than the whole batch, which can pick other
// kernel blockings: fp32 sums in another order. Bound: 1e-4 * max|whole| (measured far below).
constexpr float kTolerance = 1e-4f;

class PipelineFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(PipelineFixture, TwoStagesMatchTheWholeModel) {
  auto& w = *g_world;
  const auto dir = std::filesystem::path(WEFT_SOURCE_DIR) / "tests/fixtures/models" / GetParam();
  auto whole = load_model(dir);
  ASSERT_TRUE(whole) << whole.error().what();
  LoadOptions options;
  options.pipeline_parallel_size = w.size();
  options.pipeline_stage = w.rank();
  auto part = load_model(dir, options);
  ASSERT_TRUE(part) << part.error().what();
  const int L = whole->model.spec().num_layers;
  const int cut = (L + 1) / 2;
  EXPECT_EQ(part->model.first_layer(), w.rank() == 0 ? 0 : cut);
  EXPECT_EQ(part->model.layer_count(), w.rank() == 0 ? cut : L - cut);

  const int page_size = 4, pages = 8, vocab = whole->model.spec().vocab_size;
  model::KvCache kv_whole(whole->model.kv_layout(page_size), pages);
  cpu::ThreadPool pool(1);
  auto stage = std::make_unique<model::CpuStage>(
      part->model, model::LayerRange{part->model.first_layer(), part->model.layer_count()},
      part->model.kv_layout(page_size), pages, 1);
  auto backend = parallel::PipelineBackend::create(
      std::move(stage), w, parallel::pipeline_place(w.rank(), 1, w.size()), 2);
  ASSERT_TRUE(backend) << backend.error().what();

  // Two sequences, so each step is cut into two micro-batches in flight.
  model::StepBatch step;
  step.tokens = {5, 17, 42, 99, 3, 201, 64, 8, 9, 10};
  step.positions = {0, 1, 2, 3, 4, 5, 6, 0, 1, 2};
  step.sequences.push_back({0, 7, {0, 1, 2, 3}, true});
  step.sequences.push_back({7, 3, {4, 5, 6, 7}, false});
  std::vector<float> want, got;
  for (int s = 0; s < 5; ++s) {
    ASSERT_TRUE(whole->model.forward(step, kv_whole, want, pool));
    auto ok = (*backend)->forward(step, got);
    ASSERT_TRUE(ok) << ok.error().what();
    if (w.rank() != 0) {
      EXPECT_TRUE(got.empty());  // only rank 0 gets the logits
    } else {
      ASSERT_EQ(got.size(), want.size());
      float max_ref = 0, max_err = 0;
      for (std::size_t i = 0; i < want.size(); ++i) {
        max_ref = std::max(max_ref, std::fabs(want[i]));
        max_err = std::max(max_err, std::fabs(got[i] - want[i]));
      }
      EXPECT_LE(max_err, kTolerance * max_ref) << GetParam() << " step " << s;
    }
    // Both ranks feed the whole model's greedy tokens next.
    std::vector<std::int32_t> next;
    for (int seq = 0; seq < 2; ++seq) {
      const float* row = want.data() + want.size() - static_cast<std::size_t>(2 - seq) * vocab;
      const auto best = static_cast<std::int32_t>(std::max_element(row, row + vocab) - row);
      if (w.rank() == 0) {
        const float* mine = got.data() + got.size() - static_cast<std::size_t>(2 - seq) * vocab;
        EXPECT_EQ(std::max_element(mine, mine + vocab) - mine, best) << GetParam() << " step " << s;
      }
      next.push_back(best);
    }
    const int p0 = step.positions[static_cast<std::size_t>(step.sequences[0].token_begin +
                                                           step.sequences[0].token_count - 1)] +
                   1;
    const int p1 = step.positions.back() + 1;
    step.tokens = next;
    step.positions = {p0, p1};
    step.sequences[0] = {0, 1, {0, 1, 2, 3}, false};
    step.sequences[1] = {1, 1, {4, 5, 6, 7}, false};
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PipelineFixture,
                         ::testing::Values("llama_gqa_f32", "llama_dynamic_sharded_f32",
                                           "llama_linear_headdim_bias_f16",
                                           "llama_mqa_tied_llama3_bf16", "mistral_swa_bf16",
                                           "qwen2_tied_f32", "qwen2_yarn_bf16"));

TEST(PipelineBackend, RefusesAPlaceThatIsNotThisRank) {
  auto& w = *g_world;
  const auto dir = std::filesystem::path(WEFT_SOURCE_DIR) / "tests/fixtures/models/llama_gqa_f32";
  auto whole = load_model(dir);
  ASSERT_TRUE(whole) << whole.error().what();
  auto stage = std::make_unique<model::CpuStage>(
      whole->model, model::LayerRange{0, whole->model.spec().num_layers}, whole->model.kv_layout(4),
      2, 1);
  auto bad = parallel::PipelineBackend::create(std::move(stage), w,
                                               parallel::pipeline_place(1 - w.rank(), 1, 2), 1);
  ASSERT_FALSE(bad);
  EXPECT_NE(std::string(bad.error().what()).find("is not stage"), std::string::npos)
      << bad.error().what();
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  return weft::test_support::mpi_gtest_main(argc, argv, weft::g_world);
}
