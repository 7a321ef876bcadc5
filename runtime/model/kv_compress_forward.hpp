#pragma once
// KV-Compress inside the CPU forward pass (runtime/kv/kv_compress.hpp has the policy): a slice
// with compress_evict > 0 has its layer's cache scored by its observation window's queries and
// compacted, per kv head, right after the layer's attention ran over the whole cache, so
// the step itself (the prompt's last chunk and its logits) is exact and only later steps see
// the compressed cache.

#include <cstdint>
#include <string>
#include <vector>

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
// the attention of its last min(compress_window, token_count) queries, picks each kv head's
// survivors and compacts them. q: the step's rotated queries, [tokens][num_heads * head_dim].
void compress_layer_kv(const SequenceSlice& seq, const std::vector<std::int32_t>& positions,
                       const float* q, std::size_t num_heads, float scale, int layer, KvCache& kv,
                       cpu::KernelPath path);

}  // namespace weft::model
