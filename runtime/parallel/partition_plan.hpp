#pragma once
// Which rank holds which part of a model (docs/parallel.md). Tensor parallelism follows
// Megatron-LM: q/k/v and gate/up are split by output rows (column-parallel: each rank owns
// whole heads and a slice of the MLP's intermediate width), o and down by input columns
// (row-parallel: each rank's product is a partial sum, all-reduced after the matmul).
// Embedding, norms and lm head are replicated. Pipeline parallelism gives each stage a
// contiguous range of layers (Inferflow's "partition by layer"); ranks are numbered
// stage * tensor_parallel + tp_rank.
//
// When num_kv_heads < tensor_parallel and divides it, each kv head is replicated on
// tensor_parallel / num_kv_heads ranks (as Megatron-LM and vLLM do): every rank holds one kv
// head, the one its q heads attend to. Shapes that do not divide are refused with the
// dimension named.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/model/model_spec.hpp"
#include "weft/error.hpp"

namespace weft::parallel {

struct IndexRange {
  std::int64_t begin = 0;
  std::int64_t count = 0;
  bool operator==(const IndexRange&) const = default;
};

enum class ShardKind {
  kRows,           // the concatenation of `ranges` along dimension 0 (weights and 1-D biases)
  kColumns,        // the concatenation of `ranges` along dimension 1
  kFirstRankOnly,  // a row-parallel bias: the whole tensor on tp rank 0, zeros elsewhere
};

struct TensorShard {
  ShardKind kind = ShardKind::kRows;
  std::vector<IndexRange> ranges;
  bool operator==(const TensorShard&) const = default;
};

struct RankPartition {
  int rank = 0;                  // in the world: stage * tensor_parallel + tp_rank
  int tp_rank = 0;               // within its tensor-parallel group
  int stage = 0;                 // pipeline stage
  IndexRange layers;             // the layers this rank runs
  IndexRange q_heads;            // global q head indices
  IndexRange kv_heads;           // global kv head indices (one replicated head, or a split)
  IndexRange intermediate;       // columns of the MLP's intermediate width
  bool holds_embedding = false;  // the first stage embeds tokens
  bool holds_lm_head = false;    // the last stage computes logits
  // The model as this rank runs it: its heads, its kv heads and its intermediate width
  // (num_layers stays the model's: layer indices keep their checkpoint names).
  model::ModelSpec spec;
  // Checkpoint tensor name -> this rank's part, for every split tensor of its layers; a
  // tensor its layers use that is not listed is replicated whole.
  std::map<std::string, TensorShard> tensors;
};

struct PartitionPlan {
  int tensor_parallel = 1;
  int pipeline_parallel = 1;
  bool kv_heads_replicated = false;
  std::vector<RankPartition> ranks;  // indexed by world rank
};

// The plan for tensor_parallel x pipeline_parallel ranks. Errors name the dimension that does
// not divide ("num_heads (4) is not divisible by --tensor-parallel 3").
Result<PartitionPlan> plan_partition(const model::ModelSpec& spec, int tensor_parallel,
                                     int pipeline_parallel = 1);

// One line per rank: its layers, heads, kv heads and intermediate slice, for logs and docs.
std::string describe(const PartitionPlan& plan);

}  // namespace weft::parallel
