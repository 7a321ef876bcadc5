// CudaModel::State::prepare_step, the host side of a step before its kernels (State::run,
// cuda_model.cpp): the step's metadata (tokens, positions, KV slots, page tables, logit rows,
// decode queries and prefill tiles, rope frequencies, token trees' paths) laid out in one
// buffer and uploaded, the step's device buffers sized, and the views the kernels read them
// through.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/chain_feed.hpp"
#include "kernels/cuda/paged_attention.hpp"
#include "runtime/model/cuda/cuda_model_state.hpp"

namespace weft::model {

Result<void> CudaModel::State::prepare_step(const StepBatch& batch, bool copy_logits,
                                            PreparedStep& step) {
  const int T = static_cast<int>(batch.tokens.size());
  const int S = static_cast<int>(batch.sequences.size());
  const int V = spec.vocab_size;
  // Host side of the step: which sequence each token is in, logit rows, decode queries
  // (single-token sequences) and prefill tiles (runs of up to prefill_tile_queries tokens of
  // longer ones).
  const int R = spec.position == PositionEmbedding::kRope ? spec.rotary_dim() : 0;
  const int half = R / 2;
  // Whether decode-only steps leave the rotary embedding and the KV store to the decode
  // attention kernel (whole heads rotated in halves; WEFT_FUSED_ROPE=0 turns it off, for
  // comparisons).
  static const bool fused_rope_allowed = [] {
    const char* v = std::getenv("WEFT_FUSED_ROPE");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  const bool fused_rope = fused_rope_allowed && R > 0 && R == spec.head_dim &&
                          spec.rope.order != RopeOrder::kInterleaved &&
                          cuda::decode_attention_applies_rope(spec.num_heads, spec.num_kv_heads,
                                                              spec.head_dim, layout.dtype);
  std::size_t page_words = 0, tree_words = 0;
  bool has_tree = false, has_verify = false;
  // KV-Compress: a sequence evicted before (its slots are its positions less an offset) or
  // compressing in this step.
  bool has_offsets = false, compressing = false;
  for (const auto& seq : batch.sequences) {
    page_words += seq.page_table.size();
    has_offsets |= seq.slot_offset != 0;
    compressing |= seq.compress_evict > 0;
    has_verify |= seq.verify && seq.token_count > 0;
    if (!seq.tree_parent.empty()) {
      has_tree = true;
      // Each token lists its path's slots: at most its node's index + 1.
      const int nodes = static_cast<int>(seq.tree_parent.size());
      for (int i = 0; i < seq.token_count; ++i)
        tree_words += static_cast<std::size_t>(nodes - seq.token_count + i + 1);
    }
  }
  const int rows = batch.logit_rows();
  StepLayout L;
  {
    std::size_t at = 0;
    auto take = [&](std::size_t words) {
      const std::size_t start = at;
      at += words;
      return start;
    };
    // Page tables last: every other offset depends only on the batch's shape, so a captured
    // decode graph stays valid as the page tables grow.
    L.tokens = take(T);
    L.positions = take(T);
    L.slots = take(T);
    L.token_seq = take(T);
    L.table_begin = take(S);
    L.logit_rows = take(rows);
    L.decode_queries = take(T);
    L.tiles = take(2 * static_cast<std::size_t>(T));
    L.inv_freq = take(static_cast<std::size_t>(S) * half);
    L.factor = take(S);
    L.row_list = take(T);
    L.head_rows = take(rows);
    L.tree_from = take(has_tree ? T : 0);
    L.tree_begin = take(has_tree ? T : 0);
    L.tree_slots = take(tree_words);  // tree steps run without graphs
    L.page_ids = take(page_words);
    L.words = at;
  }
  if (auto err = meta_host.reserve(L.words * 4); err != cudaSuccess) {
    return cuda_error(err, "allocating pinned step metadata");
  }
  if (L.words * 4 > meta.bytes()) {
    // Headroom, so growing page tables rarely move the buffer (and invalidate graphs).
    drop_graphs();
    if (auto err = meta.reserve(L.words * 8 + (64u << 10)); err != cudaSuccess) {
      return cuda_error(err, "allocating step metadata");
    }
  }
  auto* words = meta_host.as<std::int32_t>();
  auto* floats = meta_host.as<float>();
  std::memcpy(words + L.tokens, batch.tokens.data(), T * sizeof(std::int32_t));
  std::memcpy(words + L.positions, batch.positions.data(), T * sizeof(std::int32_t));
  int decode_count = 0, tile_count = 0, decode_context = 0, row = 0, head_decode_rows = 0;
  const int tile_queries = cuda::prefill_tile_queries(spec.head_dim, layout.dtype);
  std::size_t page_at = 0, tree_at = 0;
  for (int s = 0; s < S; ++s) {
    const auto& seq = batch.sequences[static_cast<std::size_t>(s)];
    words[L.table_begin + s] = static_cast<std::int32_t>(page_at);
    std::copy(seq.page_table.begin(), seq.page_table.end(), words + L.page_ids + page_at);
    page_at += seq.page_table.size();
    int longest = 0;
    for (int i = seq.token_begin; i < seq.token_begin + seq.token_count; ++i) {
      words[L.token_seq + i] = s;
      words[L.slots + i] = batch.positions[static_cast<std::size_t>(i)] - seq.slot_offset;
      longest = std::max(longest, batch.positions[static_cast<std::size_t>(i)] + 1);
    }
    // Decode rows: single tokens, and speculative verification rows (each a decode query at
    // its own position, computed exactly as plain decoding computes it; docs/speculative.md).
    const bool decode_rows =
        seq.token_count == 1 || seq.verify || (seq.token_count > 0 && !seq.tree_parent.empty());
    if (seq.token_count > 0) {
      const int first = seq.all_logits ? seq.token_begin : seq.token_begin + seq.token_count - 1;
      for (int i = first; i < seq.token_begin + seq.token_count; ++i) {
        if (decode_rows) words[L.head_rows + head_decode_rows++] = row;
        words[L.logit_rows + row++] = i;
      }
    }
    if (has_tree) {
      // A tree node's path: the slots of its ancestors and itself, from the top down; its
      // positions from pos - (path length - 1) live there (kernels/cuda/tree_slots.cuh).
      const int nodes = static_cast<int>(seq.tree_parent.size());
      for (int i = 0; i < seq.token_count; ++i) {
        const int t = seq.token_begin + i;
        if (nodes == 0) {
          words[L.tree_from + t] = INT_MAX;
          continue;
        }
        const std::size_t begin = tree_at;
        for (int n = nodes - seq.token_count + i; n >= 0;
             n = seq.tree_parent[static_cast<std::size_t>(n)])
          words[L.tree_slots + tree_at++] = seq.tree_first_slot + n;
        std::reverse(words + L.tree_slots + begin, words + L.tree_slots + tree_at);
        words[L.tree_begin + t] = static_cast<std::int32_t>(begin);
        words[L.tree_from + t] = batch.positions[static_cast<std::size_t>(t)] -
                                 static_cast<std::int32_t>(tree_at - begin) + 1;
      }
    }
    if (decode_rows) {
      for (int i = seq.token_begin; i < seq.token_begin + seq.token_count; ++i) {
        words[L.row_list + decode_count] = i;
        words[L.decode_queries + decode_count++] = i;
      }
      decode_context = std::max(decode_context, longest - seq.slot_offset);
    } else {
      for (int i = 0; i < seq.token_count; i += tile_queries) {
        words[L.tiles + 2 * tile_count] = seq.token_begin + i;
        words[L.tiles + 2 * tile_count + 1] = std::min(tile_queries, seq.token_count - i);
        ++tile_count;
      }
    }
    if (R > 0) {
      const RopeFrequencies freqs =
          fixed_rope ? *fixed_rope : rope_frequencies(spec.rope, R, std::max(longest, 1));
      std::copy(freqs.inv_freq.begin(), freqs.inv_freq.end(),
                floats + L.inv_freq + static_cast<std::size_t>(s) * half);
      floats[L.factor + s] = freqs.attention_factor;
    } else {
      floats[L.factor + s] = 1.0f;
    }
  }
  const std::size_t split_floats =
      cuda::decode_workspace_floats(decode_count, spec.num_heads, spec.head_dim, decode_context);
  // The vocab-parallel head's buffers (set_tensor_parallel): this rank's columns of every row,
  // and every rank's.
  const int head_ranks = vocab_parallel && tensor_parallel != nullptr ? tensor_parallel->size() : 0;
  const std::size_t shard_bytes =
      head_ranks > 0 ? static_cast<std::size_t>(rows) * ((V + head_ranks - 1) / head_ranks) * 4 : 0;
  // Steps of few rows gather the head's logits in the group's collective memory (head_window_*).
  const bool head_in_window = shard_bytes > 0 && rows <= head_window_rows;
  const std::size_t own_shard_bytes = head_in_window ? 0 : shard_bytes;
  if (split_floats * 4 > split_workspace.bytes() ||
      static_cast<std::size_t>(rows) * V * 4 > logits.bytes() ||
      own_shard_bytes > head_shard.bytes() ||
      own_shard_bytes * head_ranks > head_gathered.bytes()) {
    drop_graphs();
  }
  if (own_shard_bytes > 0) {
    if (auto err = head_shard.reserve(shard_bytes); err != cudaSuccess) {
      return cuda_error(err, "allocating the vocab-parallel head's logits");
    }
    if (auto err = head_gathered.reserve(shard_bytes * head_ranks); err != cudaSuccess) {
      return cuda_error(err, "allocating the vocab-parallel head's gathered logits");
    }
  }
  if (auto err = split_workspace.reserve(split_floats * 4); err != cudaSuccess) {
    return cuda_error(err, "allocating the attention split workspace");
  }
  if (auto err = logits.reserve(static_cast<std::size_t>(rows) * V * 4); err != cudaSuccess) {
    return cuda_error(err, "allocating device logits");
  }
  if (copy_logits) {
    if (auto err = logits_host.reserve(static_cast<std::size_t>(rows) * V * 4);
        err != cudaSuccess) {
      return cuda_error(err, "allocating pinned logits");
    }
  }
  if (auto err = cudaMemcpyAsync(meta.get(), meta_host.as<void>(), L.words * 4,
                                 cudaMemcpyHostToDevice, stream);
      err != cudaSuccess) {
    return cuda_error(err, "uploading step metadata");
  }
  if (compressing) {
    auto prepared = kv_compress.prepare(batch, spec.num_heads, spec.num_kv_heads, stream);
    if (!prepared) return prepared.error();
  }
  if (feed_tokens != nullptr) {
    // A greedy chain's step: its tokens are the argmaxes of the step before, on the device.
    cuda::chain_feed(feed_tokens, feed_pitch, meta.as<std::int32_t>() + L.tokens, T, V, stream);
    if (auto err = cudaGetLastError(); err != cudaSuccess) {
      return cuda_error(err, "feeding the chain's tokens");
    }
  }
  if (!copy_logits) {
    // Enqueued without a wait: the next step waits for this upload before writing meta_host.
    if (meta_event == nullptr) {
      if (auto err = cudaEventCreateWithFlags(&meta_event, cudaEventDisableTiming);
          err != cudaSuccess) {
        return cuda_error(err, "creating the metadata upload event");
      }
    }
    if (auto err = cudaEventRecord(meta_event, stream); err != cudaSuccess) {
      return cuda_error(err, "recording the metadata upload");
    }
    meta_pending = true;
  }

  const auto* dev = meta.as<std::int32_t>();
  cuda::FlatBatchView fb;
  fb.positions = dev + L.slots;  // the rope kernel takes the positions themselves (ra.positions)
  fb.token_seq = dev + L.token_seq;
  fb.page_table_begin = dev + L.table_begin;
  fb.page_ids = dev + L.page_ids;
  fb.num_tokens = T;
  if (has_tree) {
    fb.tree_from = dev + L.tree_from;
    fb.tree_slot_begin = dev + L.tree_begin;
    fb.tree_slots = dev + L.tree_slots;
  }
  cuda::PagedKvView kvv;
  kvv.pool = kv.get();
  kvv.precision = options.precision;
  kvv.dtype = layout.dtype;
  // Elements of the page's type: bytes for int8/fp8, whose scales sit scales_offset bytes
  // into each layer's block.
  const std::size_t element_bytes = kv_element_bytes(layout.dtype);
  kvv.page_elems = layout.bytes_per_page() / element_bytes;
  kvv.scales_offset = layout.scales_offset();
  kvv.page_size = layout.page_size;
  kvv.num_kv_heads = layout.num_kv_heads;
  kvv.head_dim = layout.head_dim;

  step.T = T;
  step.rows = rows;
  step.R = R;
  step.decode_count = decode_count;
  step.tile_count = tile_count;
  step.decode_context = decode_context;
  step.head_decode_rows = head_decode_rows;
  step.fused_rope = fused_rope;
  step.has_tree = has_tree;
  step.has_verify = has_verify;
  step.has_offsets = has_offsets;
  step.compressing = compressing;
  step.head_in_window = head_in_window;
  step.L = L;
  step.fb = fb;
  step.kvv = kvv;
  step.element_bytes = element_bytes;
  return {};
}

}  // namespace weft::model
