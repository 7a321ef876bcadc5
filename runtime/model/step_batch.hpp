#pragma once
// What one forward step runs: a flat list of tokens from several sequences (prefill chunks and
// decode tokens alike, no padding), each token's position, and each sequence's page table.

#include <cstdint>
#include <vector>

namespace weft::model {

struct SequenceSlice {
  int token_begin = 0;  // first index into StepBatch::tokens
  int token_count = 0;
  // Page ids covering positions [0, last position]; position p lives in page
  // page_table[p / page_size] at slot p % page_size.
  std::vector<std::int32_t> page_table;
  // Logits for every token of the slice (prompt scoring) instead of only its last one.
  bool all_logits = false;
  // A token tree (speculative verification, docs/speculative.md); empty: a causal run.
  // tree_parent[j] is node j's parent (< j), or -1 for a child of the context's last token;
  // the slice's tokens are the last token_count nodes (earlier nodes were written by earlier
  // steps). Node j's keys and values live in slot tree_first_slot + j of the page table, and
  // it attends to slots [0, tree_first_slot) and to its ancestors' slots (itself included);
  // its rotary position is its entry of StepBatch::positions (the context length + depth).
  std::vector<std::int32_t> tree_parent;
  int tree_first_slot = 0;
  // KV-Compress (runtime/kv/kv_compress.hpp): slots each kv head of the sequence evicted
  // before this step. Position p lives in slot p - slot_offset (the earlier slots hold each
  // head's survivors, compacted).
  int slot_offset = 0;
  // > 0: after this step, each (layer, kv head) evicts this many slots (a multiple of the page
  // size), scored by the attention of the slice's last min(compress_window, token_count)
  // queries, and never from the last compress_window slots.
  int compress_evict = 0;
  int compress_window = 0;
  // Variable per-head KV-Compress (kv::KvCompressHeads::kVariable): the eviction above is
  // shared unevenly among each layer's kv heads, and once compressed, slot_offset is their
  // mean while each (layer, kv head) reads and writes its own slots through the record the
  // compressing step left in the backend's cache (KvCache::head_cells, keyed by
  // page_table[0]). The CPU backend runs these.
  bool compress_heads_vary = false;
  // Speculative verification rows (a chain or a tree of draft tokens after the sequence's last
  // token): a backend computes each of them as it computes a decode token (the CUDA model: the
  // decode attention kernel and the decode products), so that a verified token's logits are
  // bit for bit those plain decoding gives it. Numerics only; the result is the same causal
  // (or tree) attention either way.
  bool verify = false;
  // Encoder-decoder models (Seq2SeqModel): the pages holding the sequence's cross-attention
  // keys and values (encoder position j in cross_page_table[j / page_size]) and its encoder
  // tokens' count. When encoder_tokens is not empty the step first runs the encoder over them
  // (one batched pass for every such slice) and writes the cross pages, then the slice's
  // decoder tokens; otherwise the cross pages were written by an earlier step.
  std::vector<std::int32_t> cross_page_table;
  int cross_length = 0;
  std::vector<std::int32_t> encoder_tokens;

  // The page-table slot of the slice's i-th token whose position is `position`.
  int kv_slot(int i, int position) const {
    if (tree_parent.empty()) return position - slot_offset;
    return tree_first_slot + static_cast<int>(tree_parent.size()) - token_count + i;
  }
};

struct StepBatch {
  std::vector<std::int32_t> tokens;
  std::vector<std::int32_t> positions;  // one per token
  std::vector<SequenceSlice> sequences;

  // Some slice is a token tree (only backends with supports_token_trees() run those).
  bool has_token_tree() const {
    for (const auto& s : sequences)
      if (!s.tree_parent.empty()) return true;
    return false;
  }

  // Some slice runs the encoder this step (encoder-decoder models only).
  bool has_encoder_pass() const {
    for (const auto& s : sequences)
      if (!s.encoder_tokens.empty()) return true;
    return false;
  }

  // Rows of the logits the step returns, in sequence order.
  int logit_rows() const {
    int rows = 0;
    for (const auto& s : sequences)
      rows += s.all_logits ? s.token_count : (s.token_count > 0);
    return rows;
  }
};

}  // namespace weft::model
