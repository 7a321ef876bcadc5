// The GPU/CPU split a GPU memory budget gives (actors/pipeline_stages.hpp), and the hybrid's
// refusals; none needs a GPU.

#include "actors/pipeline_stages.hpp"

#include <gtest/gtest.h>

#include "loaders/model_loader.hpp"

namespace weft::actors {
namespace {

LoadedModel tiny() {
  auto m = load_model(std::string(WEFT_SOURCE_DIR) + "/tests/fixtures/models/llama_gqa_f32");
  EXPECT_TRUE(m) << m.error().what();
  return std::move(m.value());
}

std::int64_t layer_bytes(const model::Model& m) {
  // llama_gqa_f32: q, k, v, o, gate, up, down in 16 bits, two norms in fp32.
  const auto& s = m.spec();
  const std::int64_t H = s.hidden_size, I = s.intermediate_size;
  return 2 * (H * s.q_dim() + 2 * H * s.kv_dim() + s.q_dim() * H + 3 * H * I) + 2 * 4 * H;
}

TEST(GpuCpuSplit, KeepsOnTheCpuTheFewestLayersTheBudgetNeeds) {
  const auto loaded = tiny();
  const auto& m = loaded.model;
  const auto& s = m.spec();
  ASSERT_EQ(s.num_layers, 2);
  model::KvLayout layout = m.kv_layout(16);
  layout.dtype = KvDtype::kBF16;
  const std::int64_t embedding = std::int64_t{s.vocab_size} * s.hidden_size * 2;
  const std::int64_t layer = layer_bytes(m);
  // Everything fits in 3/4 of the budget: no layer on the CPU.
  auto all = plan_gpu_cpu_split(m, layout, 4 * (embedding + 2 * layer));
  ASSERT_TRUE(all) << all.error().what();
  EXPECT_EQ(all->cpu_layers, 0);
  EXPECT_EQ(all->gpu_weight_bytes, embedding + 2 * layer);
  // Room for one layer: the last goes to the CPU; the KV pages take what is left after the
  // weights and a tenth for buffers.
  const std::int64_t budget = (embedding + layer) * 4 / 3 + 8;
  auto one = plan_gpu_cpu_split(m, layout, budget);
  ASSERT_TRUE(one) << one.error().what();
  EXPECT_EQ(one->cpu_layers, 1);
  model::KvLayout gpu_layout = layout;
  gpu_layout.num_layers = 1;
  EXPECT_EQ(one->gpu_pages,
            std::max<std::int64_t>(1, (budget - embedding - layer - budget / 10) /
                                          static_cast<std::int64_t>(gpu_layout.bytes_per_page())));
  // Not even one layer: an error naming the sizes.
  auto none = plan_gpu_cpu_split(m, layout, embedding);
  ASSERT_FALSE(none);
  EXPECT_NE(std::string(none.error().what()).find("holds no layer"), std::string::npos)
      << none.error().what();
}

TEST(GpuCpuHybrid, RefusesTheCpuAndBadLayerCounts) {
  const auto loaded = tiny();
  StageOptions o;
  o.num_pages = 4;
  auto on_cpu = make_gpu_cpu_hybrid(loaded.model, DeviceChoice{}, loaded.model.kv_layout(16), o, 1);
  ASSERT_FALSE(on_cpu);
  EXPECT_NE(std::string(on_cpu.error().what()).find("every layer is on the CPU already"),
            std::string::npos);
  auto all =
      make_gpu_cpu_hybrid(loaded.model, DeviceChoice{true, 0}, loaded.model.kv_layout(16), o, 2);
  ASSERT_FALSE(all);
  EXPECT_STREQ(all.error().what(),
               "--cpu-layers 2 is not in [1, 1]: the model has 2 layers and the GPU keeps at least "
               "one");
}

}  // namespace
}  // namespace weft::actors

namespace weft::actors {
namespace {

// Sequence groups: one per stage by default on CPU and GPU stages; WEFT_PP_GROUPS_GPU=0 keeps
// GPU stages to one step at a time and refuses asking for more (docs/parallel.md).
TEST(PipelineGroups, DefaultPerStageAndOneOnGpusWhenTurnedOff) {
  unsetenv("WEFT_PP_GROUPS_GPU");
  EXPECT_EQ(pipeline_groups(1, 0, false), 1);
  EXPECT_EQ(pipeline_groups(1, 3, false), 1);
  EXPECT_EQ(pipeline_groups(1, 3, true), 1);
  EXPECT_EQ(pipeline_groups(2, 0, false), 2);
  EXPECT_EQ(pipeline_groups(3, 2, false), 2);
  EXPECT_EQ(pipeline_groups(2, 0, true), 2);
  EXPECT_EQ(pipeline_groups(2, 3, true), 3);
  EXPECT_EQ(pipeline_groups(2, 1, true), 1);
  EXPECT_TRUE(check_pipeline_groups(2, 2, true));
  EXPECT_TRUE(check_pipeline_groups(2, 2, false));
  setenv("WEFT_PP_GROUPS_GPU", "0", 1);
  EXPECT_EQ(pipeline_groups(2, 0, true), 1);
  EXPECT_EQ(pipeline_groups(2, 2, true), 1);
  EXPECT_EQ(pipeline_groups(2, 0, false), 2);  // CPU stages are not affected
  EXPECT_TRUE(check_pipeline_groups(2, 0, true));
  EXPECT_TRUE(check_pipeline_groups(2, 1, true));
  EXPECT_TRUE(check_pipeline_groups(2, 2, false));
  auto refused = check_pipeline_groups(2, 2, true);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), ErrorCode::kUnsupported);
  EXPECT_NE(std::string(refused.error().what()).find("WEFT_PP_GROUPS_GPU=0"), std::string::npos);
  setenv("WEFT_PP_GROUPS_GPU", "1", 1);  // any other value: on
  EXPECT_EQ(pipeline_groups(2, 0, true), 2);
  unsetenv("WEFT_PP_GROUPS_GPU");
}

}  // namespace
}  // namespace weft::actors
