#include "runtime/model/kv_compress_forward.hpp"

#include <algorithm>

#include "kernels/cpu/kv_compress.hpp"
#include "runtime/kv/kv_compress.hpp"

namespace weft::model {

Result<void> check_kv_compress(const ModelSpec& spec, const SequenceSlice& seq, int slots_after,
                               const std::string& where) {
  if (seq.slot_offset == 0 && seq.compress_evict == 0) return {};
  auto bad = [&](const std::string& what) {
    return Error(ErrorCode::kInvalidArgument, where + what);
  };
  if (seq.slot_offset < 0 || seq.compress_evict < 0 || seq.compress_window < 0) {
    return bad("negative KV-Compress slot offset, eviction or window");
  }
  if (spec.position == PositionEmbedding::kAlibi || spec.sliding_window > 0) {
    return bad(
        "KV-Compress needs attention that does not depend on distances between slots (no "
        "ALiBi, no sliding window)");
  }
  if (!seq.tree_parent.empty()) return bad("KV-Compress and token trees do not mix");
  if (seq.compress_evict > 0) {
    if (seq.token_count < 1 || seq.compress_window < 1) {
      return bad("a KV-Compress eviction needs a window and at least one token");
    }
    if (seq.compress_evict + seq.compress_window > slots_after) {
      return bad("KV-Compress evicts " + std::to_string(seq.compress_evict) +
                 " slots and keeps a window of " + std::to_string(seq.compress_window) +
                 " but the sequence holds " + std::to_string(slots_after));
    }
  }
  return {};
}

void compress_layer_kv(const SequenceSlice& seq, const std::vector<std::int32_t>& positions,
                       const float* q, std::size_t num_heads, float scale, int layer, KvCache& kv,
                       cpu::KernelPath path) {
  const KvLayout& layout = kv.layout();
  const auto last = static_cast<std::size_t>(seq.token_begin + seq.token_count - 1);
  const auto slots = static_cast<std::size_t>(positions[last] - seq.slot_offset + 1);
  const auto window = static_cast<std::size_t>(std::min(seq.compress_window, seq.token_count));
  const auto kv_heads = static_cast<std::size_t>(layout.num_kv_heads);
  const auto head_dim = static_cast<std::size_t>(layout.head_dim);

  std::vector<void*> pages;
  pages.reserve(seq.page_table.size());
  for (auto page : seq.page_table)
    pages.push_back(kv.layer_bytes(page, layer));
  const cpu::MutablePagedKv mutable_kv{pages.data(), static_cast<std::size_t>(layout.page_size),
                                       kv_heads,     head_dim,
                                       layout.dtype, layout.scales_offset()};
  std::vector<float> scores(kv_heads * slots), scratch(slots);
  const float* window_q = q + (last + 1 - window) * num_heads * head_dim;
  cpu::window_attention_scores(window_q, window, num_heads, mutable_kv.view(), slots, scale,
                               scores.data(), scratch.data(), path);
  std::vector<int> kept;
  for (std::size_t h = 0; h < kv_heads; ++h) {
    kv::select_kept_slots(std::span<const float>(scores.data() + h * slots, slots),
                          seq.compress_evict, seq.compress_window, kept);
    cpu::compact_kv_head(mutable_kv, h, kept.data(), kept.size());
  }
}

}  // namespace weft::model
