#include "runtime/model/kv_compress_forward.hpp"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/kv_compress.hpp"
#include "kernels/kv_dtype.hpp"
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
  if (seq.compress_heads_vary && seq.compress_evict > 0 && seq.slot_offset > 0) {
    return bad("a variable per-head KV-Compress compresses a sequence once (its slot offset is " +
               std::to_string(seq.slot_offset) + ")");
  }
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
                       cpu::KernelPath path, std::vector<float>* unit_scores) {
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
  if (seq.compress_heads_vary) {
    unit_scores->insert(unit_scores->end(), scores.begin(), scores.end());
    return;
  }
  std::vector<int> kept;
  for (std::size_t h = 0; h < kv_heads; ++h) {
    kv::select_kept_slots(std::span<const float>(scores.data() + h * slots, slots),
                          seq.compress_evict, seq.compress_window, kept);
    cpu::compact_kv_head(mutable_kv, h, kept.data(), kept.size());
  }
}

void compress_kv_across_heads(const SequenceSlice& seq, const std::vector<std::int32_t>& positions,
                              const std::vector<float>& unit_scores, KvCache& kv) {
  const KvLayout& layout = kv.layout();
  const auto last = static_cast<std::size_t>(seq.token_begin + seq.token_count - 1);
  const auto slots = static_cast<std::size_t>(positions[last] - seq.slot_offset + 1);
  const auto kv_heads = static_cast<std::size_t>(layout.num_kv_heads);
  const std::size_t units = static_cast<std::size_t>(layout.num_layers) * kv_heads;
  const auto page_size = static_cast<std::size_t>(layout.page_size);
  const auto evicted = kv::head_evictions(unit_scores, static_cast<int>(units), seq.compress_evict,
                                          seq.compress_window, layout.page_size);
  const kv::HeadCells cells(evicted, static_cast<int>(slots), layout.page_size);
  // Every unit's survivors are copied out (K and V rows with their scales) before any is
  // written: a unit's cell may be another unit's cell of an earlier page.
  const std::size_t row =
      static_cast<std::size_t>(layout.head_dim) * kv_element_bytes(layout.dtype);
  const bool scaled = kv_dtype_scaled(layout.dtype);
  const std::size_t v_rows = kv_heads * page_size;  // V's rows follow K's in a layer block
  auto k_row_at = [&](int page, std::size_t unit, std::size_t slot) {
    unsigned char* block = kv.layer_bytes(page, static_cast<int>(unit / kv_heads));
    return std::pair{block, (unit % kv_heads) * page_size + slot % page_size};
  };
  std::vector<std::vector<unsigned char>> rows(units);
  std::vector<std::vector<float>> row_scales(units);
  std::vector<int> kept;
  for (std::size_t u = 0; u < units; ++u) {
    kv::select_kept_slots(std::span<const float>(unit_scores.data() + u * slots, slots), evicted[u],
                          seq.compress_window, kept);
    rows[u].resize(kept.size() * 2 * row);
    row_scales[u].resize(kept.size() * 2);
    for (std::size_t i = 0; i < kept.size(); ++i) {
      const auto from = static_cast<std::size_t>(kept[i]);
      const auto [block, k_row] = k_row_at(seq.page_table[from / page_size], u, from);
      std::memcpy(rows[u].data() + 2 * i * row, block + k_row * row, row);
      std::memcpy(rows[u].data() + (2 * i + 1) * row, block + (v_rows + k_row) * row, row);
      if (scaled) {
        const auto* s = reinterpret_cast<const float*>(block + layout.scales_offset());
        row_scales[u][2 * i] = s[k_row];
        row_scales[u][2 * i + 1] = s[v_rows + k_row];
      }
    }
  }
  for (std::size_t u = 0; u < units; ++u) {
    const std::size_t count = row_scales[u].size() / 2;
    for (std::size_t i = 0; i < count; ++i) {
      const auto c = cells.cell(static_cast<int>(u), static_cast<int>(i / page_size));
      const auto [block, k_row] = k_row_at(seq.page_table[static_cast<std::size_t>(c.page)],
                                           static_cast<std::size_t>(c.unit), i);
      std::memcpy(block + k_row * row, rows[u].data() + 2 * i * row, row);
      std::memcpy(block + (v_rows + k_row) * row, rows[u].data() + (2 * i + 1) * row, row);
      if (scaled) {
        auto* s = reinterpret_cast<float*>(block + layout.scales_offset());
        s[k_row] = row_scales[u][2 * i];
        s[v_rows + k_row] = row_scales[u][2 * i + 1];
      }
    }
  }
  kv.set_head_cells(seq.page_table.front(), cells);
}

Result<void> refuse_head_cells(const StepBatch& batch, const std::string& backend) {
  for (const auto& seq : batch.sequences) {
    if (seq.compress_heads_vary) {
      return Error(ErrorCode::kUnsupported,
                   "variable per-head KV-Compress (kv_compress_heads \"variable\") runs on the "
                   "CPU backend only so far; the " +
                       backend + " reads one slot offset per sequence");
    }
  }
  return {};
}

Result<void> check_head_cells(const SequenceSlice& seq, const std::vector<std::int32_t>& positions,
                              const KvCache& kv, const std::string& where) {
  if (!reads_head_cells(seq)) return {};
  auto bad = [&](const std::string& what) {
    return Error(ErrorCode::kInvalidArgument, where + what);
  };
  if (seq.page_table.empty()) return bad("a variably compressed sequence has no pages");
  const KvLayout& layout = kv.layout();
  const kv::HeadCells* cells = kv.head_cells(seq.page_table.front());
  if (cells == nullptr || cells->units() != layout.num_layers * layout.num_kv_heads ||
      cells->mean_evicted() != seq.slot_offset) {
    return bad("no variable KV-Compress record for page " + std::to_string(seq.page_table.front()) +
               " with " + std::to_string(layout.num_layers * layout.num_kv_heads) +
               " (layer, kv head) pairs and a mean eviction of " + std::to_string(seq.slot_offset) +
               " (was the sequence compressed here?)");
  }
  for (int i = seq.token_begin; i < seq.token_begin + seq.token_count; ++i) {
    const int position = positions[static_cast<std::size_t>(i)];
    for (int u = 0; u < cells->units(); ++u) {
      const int slot = position - cells->evicted(u);
      if (slot < 0 ||
          cells->cell(u, slot / layout.page_size).page >= static_cast<int>(seq.page_table.size())) {
        return bad("position " + std::to_string(position) + ": layer " +
                   std::to_string(u / layout.num_kv_heads) + " kv head " +
                   std::to_string(u % layout.num_kv_heads) + "'s slot " + std::to_string(slot) +
                   " is beyond its page table (" + std::to_string(seq.page_table.size()) +
                   " pages)");
      }
    }
  }
  return {};
}

void store_token_in_head_cells(const SequenceSlice& seq, int position, int layer, const float* k,
                               const float* v, KvCache& kv) {
  const kv::HeadCells& cells = *kv.head_cells(seq.page_table.front());
  const int page_size = kv.layout().page_size;
  const int heads = kv.layout().num_kv_heads;
  const auto dim = static_cast<std::size_t>(kv.layout().head_dim);
  for (int h = 0; h < heads; ++h) {
    const int unit = layer * heads + h;
    const int slot = position - cells.evicted(unit);
    const auto cell = cells.cell(unit, slot / page_size);
    kv.store_head(seq.page_table[static_cast<std::size_t>(cell.page)], cell.unit / heads,
                  cell.unit % heads, slot % page_size, k + static_cast<std::size_t>(h) * dim,
                  v + static_cast<std::size_t>(h) * dim);
  }
}

void view_head_cells(const SequenceSlice& seq, int position, int layer, KvCache& kv,
                     std::vector<const void*>& blocks, std::vector<int>& rows,
                     std::vector<int>& shift, cpu::PagedKv& view) {
  const kv::HeadCells& cells = *kv.head_cells(seq.page_table.front());
  const int page_size = kv.layout().page_size;
  const int heads = kv.layout().num_kv_heads;
  int per_head = 0;
  shift.resize(static_cast<std::size_t>(heads));
  for (int h = 0; h < heads; ++h) {
    const int evicted = cells.evicted(layer * heads + h);
    shift[static_cast<std::size_t>(h)] = seq.slot_offset - evicted;
    per_head = std::max(per_head, (position - evicted) / page_size + 1);
  }
  blocks.assign(static_cast<std::size_t>(heads * per_head), nullptr);
  rows.assign(blocks.size(), 0);
  for (int h = 0; h < heads; ++h) {
    const int unit = layer * heads + h;
    const int used = (position - cells.evicted(unit)) / page_size + 1;
    for (int j = 0; j < used; ++j) {
      const auto cell = cells.cell(unit, j);
      const auto at = static_cast<std::size_t>(h * per_head + j);
      blocks[at] =
          kv.layer_bytes(seq.page_table[static_cast<std::size_t>(cell.page)], cell.unit / heads);
      rows[at] = cell.unit % heads;
    }
  }
  view.head_blocks = blocks.data();
  view.head_rows = rows.data();
  view.cells_per_head = static_cast<std::size_t>(per_head);
  view.head_shift = shift.data();
}

}  // namespace weft::model
