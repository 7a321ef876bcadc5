#include "runtime/parallel/partition_plan.hpp"

#include <sstream>

#include "runtime/model/model.hpp"

namespace weft::parallel {
namespace {

std::string range_text(const IndexRange& r) {
  return "[" + std::to_string(r.begin) + ", " + std::to_string(r.begin + r.count) + ")";
}

}  // namespace

Result<PartitionPlan> plan_partition(const model::ModelSpec& spec, int tp, int pp) {
  auto refuse = [](const std::string& what) { return Error(ErrorCode::kInvalidArgument, what); };
  auto unsupported = [](const std::string& what) { return Error(ErrorCode::kUnsupported, what); };
  if (tp < 1) return refuse("--tensor-parallel must be at least 1, not " + std::to_string(tp));
  if (pp < 1) return refuse("--pipeline-parallel must be at least 1, not " + std::to_string(pp));
  if (auto problem = model::validate(spec)) return refuse(spec.architecture + ": " + *problem);
  const std::string tp_text = " --tensor-parallel " + std::to_string(tp);
  // The planner slices checkpoint tensors as they are stored, in nn.Linear's [out, in] and
  // q|k|v order; ALiBi's slopes and learned positions would need per-rank handling too.
  // A pipeline alone cuts between whole layers, so it takes every block the forward pass has;
  // the tensor-parallel slicer does not cover these.
  if (tp > 1 && (spec.qkv_layout == model::QkvLayout::kGrouped ||
                 spec.linear_layout == model::LinearLayout::kInOut ||
                 spec.position == model::PositionEmbedding::kAlibi ||
                 spec.position == model::PositionEmbedding::kLearned || spec.parallel_attention ||
                 spec.norm_placement == model::NormPlacement::kPost ||
                 !spec.tensors.embedding_norm.empty())) {
    return unsupported(spec.architecture +
                       ": tensor parallelism covers rope models with nn.Linear "
                       "weights and pre-norm sequential layers; this spec uses a block the "
                       "partition planner does not slice (grouped qkv, Conv1D weights, ALiBi, "
                       "learned positions, parallel attention, post-norm or an embedding norm)");
  }
  if (spec.num_heads % tp != 0) {
    return refuse("num_heads (" + std::to_string(spec.num_heads) + ") is not divisible by" +
                  tp_text);
  }
  const bool kv_split = spec.num_kv_heads % tp == 0;
  if (!kv_split && tp % spec.num_kv_heads != 0) {
    return refuse("num_kv_heads (" + std::to_string(spec.num_kv_heads) +
                  ") is neither divisible by" + tp_text +
                  " nor a divisor of it (kv heads are split, or replicated when fewer than "
                  "the ranks)");
  }
  if (spec.intermediate_size % tp != 0) {
    return refuse("intermediate_size (" + std::to_string(spec.intermediate_size) +
                  ") is not divisible by" + tp_text);
  }
  if (pp > spec.num_layers) {
    return refuse("--pipeline-parallel " + std::to_string(pp) + " exceeds num_layers (" +
                  std::to_string(spec.num_layers) + "): every stage needs a layer");
  }

  PartitionPlan plan;
  plan.tensor_parallel = tp;
  plan.pipeline_parallel = pp;
  plan.kv_heads_replicated = !kv_split;
  const std::int64_t D = spec.head_dim;
  const std::int64_t QD = spec.q_dim(), KVD = spec.kv_dim(), I = spec.intermediate_size;
  const int heads = spec.num_heads / tp;
  const int inter = spec.intermediate_size / tp;
  const auto& n = spec.tensors;
  for (int stage = 0; stage < pp; ++stage) {
    // The first num_layers % pp stages take one layer more.
    const int base = spec.num_layers / pp, extra = spec.num_layers % pp;
    const int first = stage * base + std::min(stage, extra);
    const int count = base + (stage < extra ? 1 : 0);
    for (int r = 0; r < tp; ++r) {
      RankPartition part;
      part.rank = stage * tp + r;
      part.tp_rank = r;
      part.stage = stage;
      part.layers = {first, count};
      part.holds_embedding = stage == 0;
      part.holds_lm_head = stage == pp - 1;
      part.q_heads = {static_cast<std::int64_t>(r) * heads, heads};
      if (kv_split) {
        const int kv = spec.num_kv_heads / tp;
        part.kv_heads = {static_cast<std::int64_t>(r) * kv, kv};
      } else {
        // The kv head of this rank's q heads: its group is q_head / (num_heads / num_kv_heads).
        part.kv_heads = {part.q_heads.begin / (spec.num_heads / spec.num_kv_heads), 1};
      }
      part.intermediate = {static_cast<std::int64_t>(r) * inter, inter};
      part.spec = spec;
      part.spec.num_heads = heads;
      part.spec.num_kv_heads = static_cast<int>(part.kv_heads.count);
      part.spec.intermediate_size = inter;

      const IndexRange q{part.q_heads.begin * D, part.q_heads.count * D};
      const IndexRange kv{part.kv_heads.begin * D, part.kv_heads.count * D};
      const IndexRange mid = part.intermediate;
      auto add = [&](const std::string& weight, ShardKind kind, std::vector<IndexRange> ranges,
                     ShardKind bias_kind) {
        if (weight.empty()) return;
        part.tensors[weight] = {kind, ranges};
        // Column-parallel biases follow their rows; a row-parallel bias is added once.
        part.tensors[model::bias_tensor_name(weight)] =
            bias_kind == ShardKind::kFirstRankOnly ? TensorShard{bias_kind, {}}
                                                   : TensorShard{bias_kind, std::move(ranges)};
      };
      for (int l = first; l < first + count; ++l) {
        auto name = [&](const std::string& p) {
          return p.empty() ? p : model::layer_tensor_name(p, l);
        };
        if (spec.qkv_layout == model::QkvLayout::kSeparate) {
          add(name(n.q), ShardKind::kRows, {q}, ShardKind::kRows);
          add(name(n.k), ShardKind::kRows, {kv}, ShardKind::kRows);
          add(name(n.v), ShardKind::kRows, {kv}, ShardKind::kRows);
        } else {
          add(name(n.qkv), ShardKind::kRows,
              {q, {QD + kv.begin, kv.count}, {QD + KVD + kv.begin, kv.count}}, ShardKind::kRows);
        }
        add(name(n.o), ShardKind::kColumns, {q}, ShardKind::kFirstRankOnly);
        if (spec.gated_mlp && !n.gate_up.empty()) {
          add(name(n.gate_up), ShardKind::kRows, {mid, {I + mid.begin, mid.count}},
              ShardKind::kRows);
        } else {
          if (spec.gated_mlp) add(name(n.gate), ShardKind::kRows, {mid}, ShardKind::kRows);
          add(name(n.up), ShardKind::kRows, {mid}, ShardKind::kRows);
        }
        add(name(n.down), ShardKind::kColumns, {mid}, ShardKind::kFirstRankOnly);
      }
      plan.ranks.push_back(std::move(part));
    }
  }
  return plan;
}

std::string describe(const PartitionPlan& plan) {
  std::ostringstream out;
  for (const auto& p : plan.ranks) {
    out << "rank " << p.rank << " (stage " << p.stage << ", tp rank " << p.tp_rank << "): layers "
        << range_text(p.layers) << ", q heads " << range_text(p.q_heads) << ", kv heads "
        << range_text(p.kv_heads) << (plan.kv_heads_replicated ? " (replicated)" : "")
        << ", intermediate " << range_text(p.intermediate) << '\n';
  }
  return out.str();
}

}  // namespace weft::parallel
