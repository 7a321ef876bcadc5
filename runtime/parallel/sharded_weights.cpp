#include "runtime/parallel/sharded_weights.hpp"

#include <cstring>
#include <memory>
#include <unordered_map>

namespace weft::parallel {
namespace {

// True when every range lies inside [0, extent).
bool fits(const std::vector<IndexRange>& ranges, std::int64_t extent) {
  for (const auto& r : ranges) {
    if (r.begin < 0 || r.count < 0 || r.begin + r.count > extent) return false;
  }
  return true;
}

std::int64_t total(const std::vector<IndexRange>& ranges) {
  std::int64_t n = 0;
  for (const auto& r : ranges)
    n += r.count;
  return n;
}

TensorView owned_copy(const TensorView& like, std::vector<std::int64_t> shape) {
  TensorView out;
  out.dtype = like.dtype;
  out.shape = std::move(shape);
  out.device = like.device;
  // uint64 storage keeps every float dtype aligned.
  auto storage = std::make_shared<std::vector<std::uint64_t>>((out.nbytes() + 7) / 8, 0);
  out.data = reinterpret_cast<const std::byte*>(storage->data());
  out.owner = storage;
  return out;
}

// This rank's part of `t`, or nullopt when the shard does not fit the tensor's shape.
std::optional<TensorView> slice(const TensorView& t, const TensorShard& shard, int tp_rank) {
  const std::size_t elem = dtype_size(t.dtype);
  switch (shard.kind) {
    case ShardKind::kFirstRankOnly: {
      if (tp_rank == 0) return t;
      return owned_copy(t, t.shape);  // zeros: the bias is added once, by rank 0
    }
    case ShardKind::kRows: {
      if (t.shape.empty() || !fits(shard.ranges, t.shape[0])) return std::nullopt;
      std::int64_t row_elems = 1;
      for (std::size_t d = 1; d < t.shape.size(); ++d)
        row_elems *= t.shape[d];
      const std::size_t row_bytes = static_cast<std::size_t>(row_elems) * elem;
      auto shape = t.shape;
      shape[0] = total(shard.ranges);
      if (shard.ranges.size() == 1) {  // contiguous: a view into the mapping
        TensorView view = t;
        view.shape = shape;
        view.data = t.data + static_cast<std::size_t>(shard.ranges[0].begin) * row_bytes;
        return view;
      }
      TensorView out = owned_copy(t, shape);
      auto* dst = const_cast<std::byte*>(out.data);
      for (const auto& r : shard.ranges) {
        std::memcpy(dst, t.data + static_cast<std::size_t>(r.begin) * row_bytes,
                    static_cast<std::size_t>(r.count) * row_bytes);
        dst += static_cast<std::size_t>(r.count) * row_bytes;
      }
      return out;
    }
    case ShardKind::kColumns: {
      if (t.shape.size() != 2 || !fits(shard.ranges, t.shape[1])) return std::nullopt;
      const auto rows = static_cast<std::size_t>(t.shape[0]);
      const auto cols = static_cast<std::size_t>(t.shape[1]);
      TensorView out = owned_copy(t, {t.shape[0], total(shard.ranges)});
      auto* dst = const_cast<std::byte*>(out.data);
      for (std::size_t row = 0; row < rows; ++row) {
        for (const auto& r : shard.ranges) {
          const std::size_t bytes = static_cast<std::size_t>(r.count) * elem;
          std::memcpy(dst, t.data + (row * cols + static_cast<std::size_t>(r.begin)) * elem, bytes);
          dst += bytes;
        }
      }
      return out;
    }
  }
  return std::nullopt;
}

}  // namespace

model::WeightLookup shard_weights(const model::WeightLookup& full, const RankPartition& part) {
  // Slices are made on first lookup and kept: Model::create holds pointers to them while it
  // binds, and the bound views keep their storage alive through `owner`.
  auto cache = std::make_shared<std::unordered_map<std::string, TensorView>>();
  auto find = [full, part, cache](const std::string& name) -> const TensorView* {
    const TensorView* t = full.find(name);
    if (t == nullptr) return nullptr;
    const auto rule = part.tensors.find(name);
    if (rule == part.tensors.end()) return t;
    if (auto hit = cache->find(name); hit != cache->end()) return &hit->second;
    auto piece = slice(*t, rule->second, part.tp_rank);
    if (!piece) return t;
    return &cache->emplace(name, std::move(*piece)).first->second;
  };
  return model::WeightLookup{
      find, full.origin,
      full.where + " (tensor-parallel rank " + std::to_string(part.tp_rank) + ")"};
}

}  // namespace weft::parallel
