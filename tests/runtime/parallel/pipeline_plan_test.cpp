// Pipeline placement: which layers and ranks each stage gets, blocks a pipeline alone takes,
// the rank numbering of a hybrid, and the local communicator's point-to-point messages.

#include <gtest/gtest.h>

#include "runtime/parallel/communicator.hpp"
#include "runtime/parallel/partition_plan.hpp"
#include "runtime/parallel/pipeline_backend.hpp"

namespace weft::parallel {
namespace {

model::ModelSpec spec_with(int layers) {
  model::ModelSpec s;
  s.architecture = "test";
  s.vocab_size = 100;
  s.hidden_size = 64;
  s.head_dim = 16;
  s.num_heads = 4;
  s.num_kv_heads = 2;
  s.intermediate_size = 128;
  s.num_layers = layers;
  s.tensors.embedding = "embed";
  s.tensors.final_norm = "norm";
  s.tensors.lm_head = "lm_head";
  s.tensors.attn_norm = "l{layer}.attn_norm.weight";
  s.tensors.mlp_norm = "l{layer}.mlp_norm.weight";
  s.tensors.q = "l{layer}.q.weight";
  s.tensors.k = "l{layer}.k.weight";
  s.tensors.v = "l{layer}.v.weight";
  s.tensors.o = "l{layer}.o.weight";
  s.tensors.gate = "l{layer}.gate.weight";
  s.tensors.up = "l{layer}.up.weight";
  s.tensors.down = "l{layer}.down.weight";
  return s;
}

TEST(PipelinePlan, StagesCoverEveryLayerOnceInOrder) {
  for (int layers : {1, 2, 5, 8, 32, 33}) {
    for (int stages = 1; stages <= std::min(layers, 6); ++stages) {
      auto plan = plan_partition(spec_with(layers), 1, stages);
      ASSERT_TRUE(plan) << plan.error().what();
      std::int64_t next = 0;
      for (const auto& r : plan->ranks) {
        EXPECT_EQ(r.layers.begin, next) << layers << " layers, " << stages << " stages";
        EXPECT_GE(r.layers.count, layers / stages);
        EXPECT_LE(r.layers.count, layers / stages + 1);
        next += r.layers.count;
        EXPECT_EQ(r.holds_embedding, r.stage == 0);
        EXPECT_EQ(r.holds_lm_head, r.stage == stages - 1);
      }
      EXPECT_EQ(next, layers);
    }
  }
}

TEST(PipelinePlan, APipelineAloneTakesBlocksTensorParallelismDoesNotSlice) {
  auto post_norm = spec_with(4);
  post_norm.norm_placement = model::NormPlacement::kPost;
  post_norm.position = model::PositionEmbedding::kAlibi;
  EXPECT_TRUE(plan_partition(post_norm, 1, 2));
  auto split = plan_partition(post_norm, 2, 2);
  ASSERT_FALSE(split);
  EXPECT_NE(std::string(split.error().what()).find("tensor parallelism covers rope models"),
            std::string::npos)
      << split.error().what();
}

TEST(PipelinePlace, RanksAreStageTimesGroupPlusTpRank) {
  const auto p = pipeline_place(5, 2, 3);
  EXPECT_EQ(p.stage, 2);
  EXPECT_EQ(p.tp_rank, 1);
  EXPECT_EQ(p.world_rank(p.stage, p.tp_rank), 5);
  EXPECT_EQ(p.world_rank(p.stage - 1, p.tp_rank), 3);  // its peer in the stage before
  // The same numbering as the planner's.
  auto plan = plan_partition(spec_with(6), 2, 3);
  ASSERT_TRUE(plan) << plan.error().what();
  EXPECT_EQ(plan->ranks[5].stage, p.stage);
  EXPECT_EQ(plan->ranks[5].tp_rank, p.tp_rank);
}

TEST(LocalCommunicator, QueuesSendsToItselfInOrder) {
  LocalCommunicator c;
  std::vector<float> a = {1, 2}, b = {3};
  ASSERT_TRUE(c.send(std::as_bytes(std::span<const float>(a)), 0));
  ASSERT_TRUE(c.send(std::as_bytes(std::span<const float>(b)), 0));
  std::vector<float> got(2);
  ASSERT_TRUE(c.recv(std::as_writable_bytes(std::span<float>(got)), 0));
  EXPECT_EQ(got, a);
  std::vector<float> wrong(2);
  auto bad = c.recv(std::as_writable_bytes(std::span<float>(wrong)), 0);
  ASSERT_FALSE(bad);
  EXPECT_STREQ(bad.error().what(), "local recv: the message holds 4 bytes, expected 8");
  std::vector<float> one(1);
  ASSERT_TRUE(c.recv(std::as_writable_bytes(std::span<float>(one)), 0));
  EXPECT_EQ(one[0], 3.0f);
  auto empty = c.recv(std::as_writable_bytes(std::span<float>(one)), 0);
  ASSERT_FALSE(empty);
  EXPECT_FALSE(c.send({}, 1));  // no rank 1 in a group of one
  auto part = c.split(7, 0);
  ASSERT_TRUE(part);
  EXPECT_EQ((*part)->size(), 1);
}

}  // namespace
}  // namespace weft::parallel
