#include "runtime/parallel/partition_plan.hpp"

#include <gtest/gtest.h>

namespace weft::parallel {
namespace {

model::ModelSpec llama_like(int heads, int kv_heads, int intermediate, int layers = 4) {
  model::ModelSpec s;
  s.architecture = "test";
  s.vocab_size = 100;
  s.hidden_size = 64;
  s.head_dim = 16;
  s.num_heads = heads;
  s.num_kv_heads = kv_heads;
  s.intermediate_size = intermediate;
  s.num_layers = layers;
  s.qkv_bias = true;
  s.output_bias = true;
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

TEST(PartitionPlan, SplitsHeadsKvHeadsAndMlpMegatronStyle) {
  auto plan = plan_partition(llama_like(8, 4, 256), 2);
  ASSERT_TRUE(plan) << plan.error().what();
  ASSERT_EQ(plan->ranks.size(), 2u);
  EXPECT_FALSE(plan->kv_heads_replicated);
  const auto& r1 = plan->ranks[1];
  EXPECT_EQ(r1.q_heads, (IndexRange{4, 4}));
  EXPECT_EQ(r1.kv_heads, (IndexRange{2, 2}));
  EXPECT_EQ(r1.intermediate, (IndexRange{128, 128}));
  EXPECT_EQ(r1.spec.num_heads, 4);
  EXPECT_EQ(r1.spec.num_kv_heads, 2);
  EXPECT_EQ(r1.spec.intermediate_size, 128);
  EXPECT_EQ(r1.spec.hidden_size, 64);  // the residual stream is replicated
  // Column-parallel: q/k/v and gate/up by output rows (head_dim 16 per head).
  EXPECT_EQ(r1.tensors.at("l3.q.weight"), (TensorShard{ShardKind::kRows, {{64, 64}}}));
  EXPECT_EQ(r1.tensors.at("l3.q.bias"), (TensorShard{ShardKind::kRows, {{64, 64}}}));
  EXPECT_EQ(r1.tensors.at("l0.k.weight"), (TensorShard{ShardKind::kRows, {{32, 32}}}));
  EXPECT_EQ(r1.tensors.at("l0.gate.weight"), (TensorShard{ShardKind::kRows, {{128, 128}}}));
  EXPECT_EQ(r1.tensors.at("l0.up.weight"), (TensorShard{ShardKind::kRows, {{128, 128}}}));
  // Row-parallel: o and down by input columns; their biases added once, by rank 0.
  EXPECT_EQ(r1.tensors.at("l0.o.weight"), (TensorShard{ShardKind::kColumns, {{64, 64}}}));
  EXPECT_EQ(r1.tensors.at("l0.down.weight"), (TensorShard{ShardKind::kColumns, {{128, 128}}}));
  EXPECT_EQ(r1.tensors.at("l0.o.bias").kind, ShardKind::kFirstRankOnly);
  // Replicated: embedding, norms, lm head.
  EXPECT_EQ(r1.tensors.count("embed"), 0u);
  EXPECT_EQ(r1.tensors.count("l0.attn_norm.weight"), 0u);
  EXPECT_EQ(r1.tensors.count("lm_head"), 0u);
  EXPECT_EQ(plan->ranks[0].tensors.at("l0.q.weight"), (TensorShard{ShardKind::kRows, {{0, 64}}}));
}

TEST(PartitionPlan, ReplicatesKvHeadsWhenFewerThanRanks) {
  auto plan = plan_partition(llama_like(8, 2, 256), 4);
  ASSERT_TRUE(plan) << plan.error().what();
  EXPECT_TRUE(plan->kv_heads_replicated);
  // Two q heads per rank; q heads 0-3 attend kv head 0, 4-7 kv head 1.
  const int expected_kv[] = {0, 0, 1, 1};
  for (int r = 0; r < 4; ++r) {
    const auto& part = plan->ranks[static_cast<std::size_t>(r)];
    EXPECT_EQ(part.q_heads, (IndexRange{2 * r, 2}));
    EXPECT_EQ(part.kv_heads, (IndexRange{expected_kv[r], 1})) << "rank " << r;
    EXPECT_EQ(part.spec.num_kv_heads, 1);
    EXPECT_EQ(part.tensors.at("l1.v.weight"),
              (TensorShard{ShardKind::kRows, {{expected_kv[r] * 16, 16}}}));
  }
}

TEST(PartitionPlan, SplitsFusedQkvAndGateUpIntoTheirParts) {
  auto spec = llama_like(4, 2, 128);
  spec.qkv_layout = model::QkvLayout::kFused;
  spec.tensors.qkv = "l{layer}.qkv.weight";
  spec.tensors.gate_up = "l{layer}.gate_up.weight";
  auto plan = plan_partition(spec, 2);
  ASSERT_TRUE(plan) << plan.error().what();
  const auto& r1 = plan->ranks[1];
  // qkv rows: q [0, 64), k [64, 96), v [96, 128); rank 1 takes the second half of each.
  EXPECT_EQ(r1.tensors.at("l0.qkv.weight"),
            (TensorShard{ShardKind::kRows, {{32, 32}, {80, 16}, {112, 16}}}));
  EXPECT_EQ(r1.tensors.at("l0.qkv.bias"),
            (TensorShard{ShardKind::kRows, {{32, 32}, {80, 16}, {112, 16}}}));
  // gate_up rows: gate [0, 128), up [128, 256).
  EXPECT_EQ(r1.tensors.at("l0.gate_up.weight"),
            (TensorShard{ShardKind::kRows, {{64, 64}, {192, 64}}}));
  EXPECT_EQ(r1.tensors.count("l0.gate.weight"), 0u);
}

TEST(PartitionPlan, RefusesShapesThatDoNotDivideNamingTheDimension) {
  auto heads = plan_partition(llama_like(4, 2, 128), 3);
  ASSERT_FALSE(heads);
  EXPECT_STREQ(heads.error().what(), "num_heads (4) is not divisible by --tensor-parallel 3");
  auto kv = plan_partition(llama_like(12, 3, 128), 2);
  ASSERT_FALSE(kv);
  EXPECT_NE(std::string(kv.error().what()).find("num_kv_heads (3) is neither divisible"),
            std::string::npos)
      << kv.error().what();
  auto inter = plan_partition(llama_like(4, 2, 130), 4);
  ASSERT_FALSE(inter);
  EXPECT_STREQ(inter.error().what(),
               "intermediate_size (130) is not divisible by --tensor-parallel 4");
  EXPECT_FALSE(plan_partition(llama_like(4, 2, 128), 0));
  auto stages = plan_partition(llama_like(4, 2, 128, 2), 1, 3);
  ASSERT_FALSE(stages);
  EXPECT_NE(std::string(stages.error().what()).find("exceeds num_layers (2)"), std::string::npos);
}

TEST(PartitionPlan, PipelineStagesTakeContiguousLayerRanges) {
  auto plan = plan_partition(llama_like(4, 2, 128, 5), 2, 2);
  ASSERT_TRUE(plan) << plan.error().what();
  ASSERT_EQ(plan->ranks.size(), 4u);
  // 5 layers over 2 stages: the first stage takes the extra one.
  EXPECT_EQ(plan->ranks[0].layers, (IndexRange{0, 3}));
  EXPECT_EQ(plan->ranks[1].layers, (IndexRange{0, 3}));
  EXPECT_EQ(plan->ranks[2].layers, (IndexRange{3, 2}));
  EXPECT_EQ(plan->ranks[3].stage, 1);
  EXPECT_EQ(plan->ranks[3].tp_rank, 1);
  EXPECT_TRUE(plan->ranks[0].holds_embedding);
  EXPECT_FALSE(plan->ranks[0].holds_lm_head);
  EXPECT_TRUE(plan->ranks[3].holds_lm_head);
  // A stage lists only its own layers' tensors.
  EXPECT_EQ(plan->ranks[0].tensors.count("l3.q.weight"), 0u);
  EXPECT_EQ(plan->ranks[2].tensors.count("l3.q.weight"), 1u);
  EXPECT_EQ(plan->ranks[2].tensors.count("l2.q.weight"), 0u);
  EXPECT_NE(describe(*plan).find("rank 3 (stage 1, tp rank 1): layers [3, 5), q heads [2, 4)"),
            std::string::npos)
      << describe(*plan);
}

TEST(PartitionPlan, OneRankIsTheWholeModel) {
  auto spec = llama_like(4, 2, 128);
  auto plan = plan_partition(spec, 1);
  ASSERT_TRUE(plan) << plan.error().what();
  const auto& r0 = plan->ranks[0];
  EXPECT_EQ(r0.spec.num_heads, 4);
  EXPECT_EQ(r0.spec.num_kv_heads, 2);
  EXPECT_EQ(r0.tensors.at("l0.o.weight"), (TensorShard{ShardKind::kColumns, {{0, 64}}}));
}

}  // namespace
}  // namespace weft::parallel
