#include "runtime/parallel/sharded_weights.hpp"

#include <gtest/gtest.h>

#include <map>

namespace weft::parallel {
namespace {

// A checkpoint of f32 tensors whose element i holds the value base + i.
struct Checkpoint {
  std::map<std::string, TensorView> tensors;
  void add(const std::string& name, std::vector<std::int64_t> shape, float base) {
    std::int64_t n = 1;
    for (auto d : shape)
      n *= d;
    std::vector<float> values(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = base + static_cast<float>(i);
    tensors[name] = make_f32_tensor(std::move(shape), std::move(values));
  }
  model::WeightLookup lookup() const {
    return {[this](const std::string& name) -> const TensorView* {
              auto it = tensors.find(name);
              return it == tensors.end() ? nullptr : &it->second;
            },
            [](const std::string& name) { return "test.safetensors (" + name + ")"; }, "test"};
  }
};

std::vector<float> values(const TensorView& t) {
  return std::vector<float>(t.as<float>(), t.as<float>() + t.numel());
}

TEST(ShardedWeights, CutsRowsColumnsFusedPartsAndZeroBiases) {
  Checkpoint ckpt;
  ckpt.add("rows", {4, 3}, 0);       // rows 2..3 -> a view
  ckpt.add("cols", {2, 4}, 100);     // columns 1..2
  ckpt.add("fused", {6, 2}, 200);    // rows {0}, {3, 4}
  ckpt.add("bias", {3}, 300);        // rank 0 only
  ckpt.add("replicated", {2}, 400);  // not in the plan
  ckpt.add("wrong", {2, 2}, 500);    // rows 1..4 do not fit: returned whole
  RankPartition part;
  part.tp_rank = 1;
  part.tensors["rows"] = {ShardKind::kRows, {{2, 2}}};
  part.tensors["cols"] = {ShardKind::kColumns, {{1, 2}}};
  part.tensors["fused"] = {ShardKind::kRows, {{0, 1}, {3, 2}}};
  part.tensors["bias"] = {ShardKind::kFirstRankOnly, {}};
  part.tensors["wrong"] = {ShardKind::kRows, {{1, 4}}};
  const auto full = ckpt.lookup();
  const auto shard = shard_weights(full, part);

  const TensorView* rows = shard.find("rows");
  ASSERT_NE(rows, nullptr);
  EXPECT_EQ(rows->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(rows->data, ckpt.tensors["rows"].data + 6 * sizeof(float));  // no copy
  EXPECT_EQ(values(*rows), (std::vector<float>{6, 7, 8, 9, 10, 11}));

  const TensorView* cols = shard.find("cols");
  EXPECT_EQ(cols->shape, (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(values(*cols), (std::vector<float>{101, 102, 105, 106}));

  const TensorView* fused = shard.find("fused");
  EXPECT_EQ(fused->shape, (std::vector<std::int64_t>{3, 2}));
  EXPECT_EQ(values(*fused), (std::vector<float>{200, 201, 206, 207, 208, 209}));
  EXPECT_EQ(shard.find("fused"), fused);  // cut once, then the same view

  EXPECT_EQ(values(*shard.find("bias")), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(shard.find("replicated"), &ckpt.tensors["replicated"]);
  EXPECT_EQ(shard.find("wrong"), &ckpt.tensors["wrong"]);
  EXPECT_EQ(shard.find("absent"), nullptr);
  EXPECT_NE(shard.where.find("tensor-parallel rank 1"), std::string::npos);

  part.tp_rank = 0;
  const auto first = shard_weights(full, part);
  EXPECT_EQ(values(*first.find("bias")), (std::vector<float>{300, 301, 302}));
}

}  // namespace
}  // namespace weft::parallel
