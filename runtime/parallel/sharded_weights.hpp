#pragma once
// A rank's view of a checkpoint: the WeightLookup Model::create binds, returning for each
// tensor the plan splits only this rank's part (runtime/parallel/partition_plan.hpp). Row
// slices of a mapped tensor are views into the mapping (no copy); column slices, fused
// tensors' pieces and zero biases are copied once into memory the view owns.

#include "runtime/model/model.hpp"
#include "runtime/parallel/partition_plan.hpp"

namespace weft::parallel {

// A tensor whose rank or size does not fit its shard
// is returned whole, so Model::create's shape check reports it against the rank's spec.
model::WeightLookup shard_weights(const model::WeightLookup& full, const RankPartition& part);

}  // namespace weft::parallel
