#pragma once
// KV-Compress inside the CPU forward pass (runtime/kv/kv_compress.hpp has the policy): a slice
// with compress_evict > 0 has its layer's cache scored by its observation window's queries and
// compacted, per kv head, right after the layer's attention ran over the whole cache, so
// the step itself (the prompt's last chunk and its logits) is exact and only later steps see
// the compressed cache.

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/paged_attention.hpp"
#include "kernels/cpu/vector_math.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/model_spec.hpp"
#include "runtime/model/step_batch.hpp"
#include "weft/error.hpp"

namespace weft::model {

// A slice's KV-Compress fields against the model: slot offsets and evictions need causal
// attention whose bias does not depend on the distance (no ALiBi, no sliding window) and
// no token tree; an eviction must leave its window of the slots_after slots the sequence
// holds after the step. `where` prefixes the message.
Result<void> check_kv_compress(const ModelSpec& spec, const SequenceSlice& seq, int slots_after,
                               const std::string& where);

// Scores layer `layer`'s cache of `seq` (whose keys and values for this step are stored) by
// the attention of its last min(compress_window, token_count) queries. Uniform: picks each kv
// head's survivors and compacts them now. Variable (seq.compress_heads_vary): appends the
// layer's scores ([kv head][slot]) to *unit_scores, for compress_kv_across_heads once every
// layer has run. q: the step's rotated queries, [tokens][num_heads * head_dim].
void compress_layer_kv(const SequenceSlice& seq, const std::vector<std::int32_t>& positions,
                       const float* q, std::size_t num_heads, float scale, int layer, KvCache& kv,
                       cpu::KernelPath path, std::vector<float>* unit_scores);

// Variable KV-Compress after the step's last layer: unit_scores holds every layer's scores
// (compress_layer_kv); the (layer, kv head) pairs share the eviction (kv::head_evictions),
// their survivors move into their cells (kv::HeadCells) and the record goes into the cache
// for the steps after.
void compress_kv_across_heads(const SequenceSlice& seq, const std::vector<std::int32_t>& positions,
                              const std::vector<float>& unit_scores, KvCache& kv);

// For backends without per-head cells (the CUDA model): an error naming `backend` if a slice
// asks for variable per-head KV-Compress.
Result<void> refuse_head_cells(const StepBatch& batch, const std::string& backend);

// Variable per-head KV-Compress, after the compression: a slice with compress_heads_vary and a
// slot offset reads and writes each kv head's slots through its record in the cache.
inline bool reads_head_cells(const SequenceSlice& seq) {
  return seq.compress_heads_vary && seq.slot_offset > 0;
}
// Such a slice has a record for every (layer, kv head) of the cache whose mean is its slot
// offset, and every pair's slot for each of its tokens lies in its page table.
Result<void> check_head_cells(const SequenceSlice& seq, const std::vector<std::int32_t>& positions,
                              const KvCache& kv, const std::string& where);
// Stores the token at `position` (k, v: [num_kv_heads][head_dim]) into each head's own slot.
void store_token_in_head_cells(const SequenceSlice& seq, int position, int layer, const float* k,
                               const float* v, KvCache& kv);
// Points `view` (whose pages the caller set) at each head's cells for a token at `position`;
// the vectors hold what the view points to.
void view_head_cells(const SequenceSlice& seq, int position, int layer, KvCache& kv,
                     std::vector<const void*>& blocks, std::vector<int>& rows,
                     std::vector<int>& shift, cpu::PagedKv& view);

}  // namespace weft::model
