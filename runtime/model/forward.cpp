// Model::forward: one step of a decoder-only transformer over a flat batch with paged KV.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/embedding.hpp"
#include "kernels/cpu/norm.hpp"
#include "kernels/cpu/paged_attention.hpp"
#include "kernels/cpu/rope.hpp"
#include "kernels/cpu/tree_attention.hpp"
#include "runtime/model/kv_compress_forward.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/rope_frequencies.hpp"

namespace weft::model {

cpu::ActivationKind cpu_activation(Activation a) {
  switch (a) {
    case Activation::kSilu:
      return cpu::ActivationKind::kSilu;
    case Activation::kGelu:
      return cpu::ActivationKind::kGelu;
    case Activation::kGeluTanh:
      return cpu::ActivationKind::kGeluTanh;
    case Activation::kRelu:
      return cpu::ActivationKind::kRelu;
  }
  return cpu::ActivationKind::kSilu;
}

namespace {

const float* bias_or_null(const std::vector<float>& b) {
  return b.empty() ? nullptr : b.data();
}

void normalize(const ModelSpec& spec, const float* x, std::size_t tokens,
               const std::vector<float>& weight, const std::vector<float>& bias, float* out,
               cpu::KernelPath path) {
  const auto n = static_cast<std::size_t>(spec.hidden_size);
  const auto eps = static_cast<float>(spec.norm_epsilon);
  if (spec.norm == Norm::kRms) {
    cpu::rms_norm(x, tokens, n, weight.data(), eps, out, path);
  } else {
    cpu::layer_norm(x, tokens, n, weight.data(), bias_or_null(bias), eps, out, path);
  }
}

// The slots a token tree's node attends to, ascending: the context from `first` (a sliding
// window's start), then the node's ancestors and itself, whose positions are at least `first`.
void tree_slots(const SequenceSlice& seq, int i, const std::vector<std::int32_t>& positions,
                std::size_t first, std::vector<std::size_t>& slots) {
  slots.clear();
  for (auto s = first; s < static_cast<std::size_t>(seq.tree_first_slot); ++s)
    slots.push_back(s);
  const std::size_t context = slots.size();
  const int nodes = static_cast<int>(seq.tree_parent.size());
  // Positions of earlier steps' nodes are not in this batch: a node's position is the
  // context's length plus its depth, so count depths from the batch's own node.
  int node = nodes - seq.token_count + i;
  auto position =
      static_cast<std::size_t>(positions[static_cast<std::size_t>(seq.token_begin + i)]);
  while (node >= 0) {
    if (position >= first) slots.push_back(static_cast<std::size_t>(seq.tree_first_slot + node));
    node = seq.tree_parent[static_cast<std::size_t>(node)];
    --position;
  }
  std::reverse(slots.begin() + static_cast<std::ptrdiff_t>(context), slots.end());
}

}  // namespace

Result<void> check_step_batch(const ModelSpec& spec, const StepBatch& batch, const KvLayout& have,
                              int num_pages) {
  auto bad = [](const std::string& what) { return Error(ErrorCode::kInvalidArgument, what); };
  if (have.num_layers != spec.num_layers || have.num_kv_heads != spec.num_kv_heads ||
      have.head_dim != spec.head_dim) {
    return bad("KV cache layout does not match the model (layers, kv heads, head_dim)");
  }
  if (batch.positions.size() != batch.tokens.size()) {
    return bad("step batch has " + std::to_string(batch.tokens.size()) + " tokens but " +
               std::to_string(batch.positions.size()) + " positions");
  }
  std::size_t covered = 0;
  for (std::size_t s = 0; s < batch.sequences.size(); ++s) {
    const auto& seq = batch.sequences[s];
    const std::string where = "sequence " + std::to_string(s) + ": ";
    if (seq.token_begin < 0 || seq.token_count < 0 ||
        static_cast<std::size_t>(seq.token_begin) + seq.token_count > batch.tokens.size()) {
      return bad(where + "token range outside the batch");
    }
    covered += static_cast<std::size_t>(seq.token_count);
    for (const auto page : seq.page_table) {
      if (page < 0 || page >= num_pages) {
        return bad(where + "page id " + std::to_string(page) + " is not in [0, " +
                   std::to_string(num_pages) + ")");
      }
    }
    const auto capacity = static_cast<std::int64_t>(seq.page_table.size()) * have.page_size;
    const int slots_after =
        seq.token_count > 0
            ? batch.positions[static_cast<std::size_t>(seq.token_begin + seq.token_count - 1)] -
                  seq.slot_offset + 1
            : 0;
    if (auto ok = check_kv_compress(spec, seq, slots_after, where); !ok) return ok;
    if (!seq.tree_parent.empty()) {
      const auto nodes = static_cast<std::int64_t>(seq.tree_parent.size());
      if (nodes < seq.token_count || seq.tree_first_slot < 0 ||
          seq.tree_first_slot + nodes > capacity) {
        return bad(where + "token tree of " + std::to_string(nodes) + " nodes from slot " +
                   std::to_string(seq.tree_first_slot) + " does not fit its " +
                   std::to_string(seq.token_count) + " tokens and " + std::to_string(capacity) +
                   " slots");
      }
      for (std::int64_t j = 0; j < nodes; ++j) {
        const auto parent = seq.tree_parent[static_cast<std::size_t>(j)];
        if (parent < -1 || parent >= j) {
          return bad(where + "token tree node " + std::to_string(j) + " has parent " +
                     std::to_string(parent) + " (must be -1 or an earlier node)");
        }
      }
    }
    for (int i = seq.token_begin; i < seq.token_begin + seq.token_count; ++i) {
      const auto token = batch.tokens[static_cast<std::size_t>(i)];
      const auto pos = batch.positions[static_cast<std::size_t>(i)];
      if (token < 0 || token >= spec.vocab_size) {
        return bad(where + "token id " + std::to_string(token) + " is outside the vocabulary [0, " +
                   std::to_string(spec.vocab_size) + ")");
      }
      if (spec.position == PositionEmbedding::kLearned && pos >= spec.max_positions) {
        return bad(where + "position " + std::to_string(pos) +
                   " is beyond the learned position table (max_position_embeddings " +
                   std::to_string(spec.max_positions) + ")");
      }
      if (pos < seq.slot_offset || pos - seq.slot_offset >= capacity) {
        const std::string slot =
            seq.slot_offset == 0 ? "" : " (slot " + std::to_string(pos - seq.slot_offset) + ")";
        return bad(where + "position " + std::to_string(pos) + slot +
                   " is beyond its page table (" + std::to_string(capacity) + " slots)");
      }
    }
  }
  if (covered != batch.tokens.size()) {
    return bad("step batch sequences cover " + std::to_string(covered) + " of " +
               std::to_string(batch.tokens.size()) + " tokens");
  }
  return {};
}

Result<void> Model::forward(const StepBatch& batch, KvCache& kv, std::vector<float>& logits,
                            cpu::ThreadPool& pool, cpu::KernelPath path,
                            parallel::Communicator* tensor_parallel) const {
  return forward_layers(batch, kv, {first_layer_, layer_count_}, {}, logits, pool, path,
                        tensor_parallel);
}

Result<void> Model::forward_layers(const StepBatch& batch, KvCache& kv, LayerRange layers,
                                   std::span<const float> hidden_in, std::vector<float>& logits,
                                   cpu::ThreadPool& pool, cpu::KernelPath path,
                                   parallel::Communicator* tensor_parallel) const {
  if (layers.begin < first_layer_ || layers.count < 1 ||
      layers.begin + layers.count > first_layer_ + layer_count_) {
    return Error(ErrorCode::kInvalidArgument,
                 "layers [" + std::to_string(layers.begin) + ", " +
                     std::to_string(layers.begin + layers.count) + ") are not among the held [" +
                     std::to_string(first_layer_) + ", " +
                     std::to_string(first_layer_ + layer_count_) + ")");
  }
  if (kv.layout().num_layers != layers.count) {
    return Error(ErrorCode::kInvalidArgument,
                 "KV cache layout does not match the model (layers, kv heads, head_dim): it "
                 "holds " +
                     std::to_string(kv.layout().num_layers) + " layers, the layers run " +
                     std::to_string(layers.count));
  }
  {
    // The batch's checks see the whole model's layer count; the cache holds the stage's.
    KvLayout whole = kv.layout();
    whole.num_layers = spec_.num_layers;
    if (auto ok = check_step_batch(spec_, batch, whole, kv.num_pages()); !ok) return ok;
    for (std::size_t s = 0; s < batch.sequences.size(); ++s) {
      if (auto ok = check_head_cells(batch.sequences[s], batch.positions, kv,
                                     "sequence " + std::to_string(s) + ": ");
          !ok) {
        return ok;
      }
    }
  }
  const bool embeds = layers.begin == 0;
  const bool ends = layers.begin + layers.count == spec_.num_layers;
  path = cpu::resolve(path);
  const std::size_t T = batch.tokens.size();
  const auto H = static_cast<std::size_t>(spec_.hidden_size);
  if (!embeds && hidden_in.size() != T * H) {
    return Error(ErrorCode::kInvalidArgument, "a stage from layer " + std::to_string(layers.begin) +
                                                  " takes " + std::to_string(T) + " x " +
                                                  std::to_string(H) +
                                                  " hidden values from the stage before, got " +
                                                  std::to_string(hidden_in.size()));
  }
  const auto I = static_cast<std::size_t>(spec_.intermediate_size);
  const auto D = static_cast<std::size_t>(spec_.head_dim);
  const auto NH = static_cast<std::size_t>(spec_.num_heads);
  const auto NKV = static_cast<std::size_t>(spec_.num_kv_heads);
  const std::size_t QD = NH * D, KVD = NKV * D;
  const auto page_size = static_cast<std::size_t>(kv.layout().page_size);

  // Which sequence each token belongs to, and the longest context any token sees.
  std::vector<std::size_t> seq_of(T);
  std::size_t max_context = 0;
  for (std::size_t s = 0; s < batch.sequences.size(); ++s) {
    const auto& seq = batch.sequences[s];
    for (int i = seq.token_begin; i < seq.token_begin + seq.token_count; ++i) {
      seq_of[static_cast<std::size_t>(i)] = s;
      max_context =
          std::max<std::size_t>(max_context, batch.positions[static_cast<std::size_t>(i)] + 1);
    }
    if (!seq.tree_parent.empty()) {
      max_context =
          std::max<std::size_t>(max_context, seq.tree_first_slot + seq.tree_parent.size());
    }
  }

  // Rotary cos/sin per token. Frequencies are per sequence: dynamic NTK scaling depends on
  // the sequence's length after this step, as transformers' dynamic_rope_update does.
  const std::size_t R =
      spec_.position == PositionEmbedding::kRope ? static_cast<std::size_t>(spec_.rotary_dim()) : 0;
  std::vector<float> cos_table(T * (R / 2)), sin_table(T * (R / 2));
  if (R > 0) {
    for (const auto& seq : batch.sequences) {
      int longest = 0;
      for (int i = seq.token_begin; i < seq.token_begin + seq.token_count; ++i) {
        longest = std::max(longest, batch.positions[static_cast<std::size_t>(i)] + 1);
      }
      const auto freqs = rope_frequencies(spec_.rope, static_cast<int>(R), longest);
      for (int i = seq.token_begin; i < seq.token_begin + seq.token_count; ++i) {
        const auto t = static_cast<std::size_t>(i);
        const auto pos = static_cast<float>(batch.positions[t]);
        for (std::size_t j = 0; j < R / 2; ++j) {
          const float angle = pos * freqs.inv_freq[j];  // fp32 product, as torch forms it
          cos_table[t * (R / 2) + j] = static_cast<float>(std::cos(angle)) * freqs.attention_factor;
          sin_table[t * (R / 2) + j] = static_cast<float>(std::sin(angle)) * freqs.attention_factor;
        }
      }
    }
  }
  const auto pairing = spec_.rope.order == RopeOrder::kHalfSplit ? cpu::RopePairing::kHalfSplit
                                                                 : cpu::RopePairing::kInterleaved;

  std::vector<float> x(T * H), h(T * H), q(T * QD), k(T * KVD), v(T * KVD), attn(T * QD);
  std::vector<float> gate(T * I), up(T * I), fused, attn_out(T * H), mlp_in;
  if (!embeds) {
    std::copy(hidden_in.begin(), hidden_in.end(), x.begin());
  } else {
    const cpu::EmbeddingTable tokens{embedding_.dtype, embedding_.data,
                                     static_cast<std::size_t>(spec_.vocab_size), H};
    const cpu::EmbeddingTable positions{
        position_table_.dtype, position_table_.data,
        static_cast<std::size_t>(spec_.max_positions + spec_.position_offset), H};
    cpu::embed_tokens(tokens, batch.tokens.data(), T, static_cast<float>(spec_.embedding_scale),
                      position_table_.data != nullptr ? &positions : nullptr,
                      batch.positions.data(), static_cast<std::size_t>(spec_.position_offset),
                      x.data(), path);
    if (!embedding_norm_.empty()) {
      normalize(spec_, x.data(), T, embedding_norm_, embedding_norm_bias_, x.data(), path);
    }
  }
  const bool post_norm = spec_.norm_placement == NormPlacement::kPost;
  const float* alibi = alibi_slopes_.empty() ? nullptr : alibi_slopes_.data();
  if (alibi != nullptr && batch.has_token_tree()) {
    return Error(ErrorCode::kInvalidArgument,
                 "token trees (speculative verification) are not supported with ALiBi yet");
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // Row-parallel products (o, down) hold this rank's partial sum until reduced.
  auto reduce = [&](std::vector<float>& partial) -> Result<void> {
    if (tensor_parallel == nullptr) return {};
    if (tensor_parallel->device_buffers()) {
      return Error(ErrorCode::kInvalidArgument, "the CPU forward pass reduces host memory; the " +
                                                    tensor_parallel->name() +
                                                    " communicator wants device buffers");
    }
    return tensor_parallel->all_reduce_sum(std::span<float>(partial.data(), T * H));
  };

  // Variable KV-Compress: each compressing sequence's scores, every layer's, until the last.
  std::vector<std::vector<float>> unit_scores(batch.sequences.size());
  const auto layer_end = static_cast<std::size_t>(layers.begin + layers.count);
  for (auto l = static_cast<std::size_t>(layers.begin); l < layer_end; ++l) {
    const Layer& L = layers_[l];
    const int kv_layer = static_cast<int>(l) - layers.begin;  // the cache holds the stage's
    if (post_norm) {
      std::copy(x.begin(), x.end(), h.begin());
    } else {
      normalize(spec_, x.data(), T, L.attn_norm, L.attn_norm_bias, h.data(), path);
    }
    if (spec_.qkv_layout == QkvLayout::kSeparate) {
      const cpu::MatmulOutput qkv[] = {{&L.q, bias_or_null(L.q_bias), q.data()},
                                       {&L.k, bias_or_null(L.k_bias), k.data()},
                                       {&L.v, bias_or_null(L.v_bias), v.data()}};
      cpu::matmul_group(h.data(), T, qkv, &pool, path);
    } else {
      fused.resize(T * (QD + 2 * KVD));
      cpu::matmul(h.data(), T, L.qkv, bias_or_null(L.qkv_bias), fused.data(), &pool, path);
      for (std::size_t t = 0; t < T; ++t) {
        const float* row = fused.data() + t * (QD + 2 * KVD);
        std::memcpy(q.data() + t * QD, row, QD * sizeof(float));
        std::memcpy(k.data() + t * KVD, row + QD, KVD * sizeof(float));
        std::memcpy(v.data() + t * KVD, row + QD + KVD, KVD * sizeof(float));
      }
    }
    // Rotate, then store this step's keys and values before any token attends, so a
    // prefill chunk sees its own earlier tokens through the same pages as a decode step.
    for (std::size_t t = 0; t < T; ++t) {
      if (R > 0) {
        cpu::apply_rope(q.data() + t * QD, NH, D, R, cos_table.data() + t * (R / 2),
                        sin_table.data() + t * (R / 2), pairing);
        cpu::apply_rope(k.data() + t * KVD, NKV, D, R, cos_table.data() + t * (R / 2),
                        sin_table.data() + t * (R / 2), pairing);
      }
      const auto& seq = batch.sequences[seq_of[t]];
      if (reads_head_cells(seq)) {
        store_token_in_head_cells(seq, batch.positions[t], kv_layer, k.data() + t * KVD,
                                  v.data() + t * KVD, kv);
        continue;
      }
      const auto pos = static_cast<std::size_t>(
          seq.kv_slot(static_cast<int>(t) - seq.token_begin, batch.positions[t]));
      kv.store_token(seq.page_table[pos / page_size], kv_layer, static_cast<int>(pos % page_size),
                     k.data() + t * KVD, v.data() + t * KVD);
    }
    const bool windowed = spec_.layer_uses_window(static_cast<int>(l));
    pool.parallel_for(T, [&](std::size_t begin, std::size_t end) {
      std::vector<float> scratch(max_context);
      std::vector<const void*> pages, head_blocks;
      std::vector<int> head_rows, head_shift;
      std::vector<std::size_t> slots;
      for (std::size_t t = begin; t < end; ++t) {
        const auto& seq = batch.sequences[seq_of[t]];
        pages.clear();
        for (auto page : seq.page_table)
          pages.push_back(kv.layer_bytes(page, kv_layer));
        cpu::PagedKv view{
            pages.data(), page_size, NKV, D, kv.layout().dtype, kv.layout().scales_offset()};
        if (reads_head_cells(seq)) {
          view_head_cells(seq, batch.positions[t], kv_layer, kv, head_blocks, head_rows, head_shift,
                          view);
        }
        // The token's own slot: positions and slots differ after a KV-Compress eviction.
        const auto pos = static_cast<std::size_t>(batch.positions[t] - seq.slot_offset);
        const std::size_t window = static_cast<std::size_t>(spec_.sliding_window);
        const std::size_t first = windowed && pos + 1 > window ? pos + 1 - window : 0;
        if (!seq.tree_parent.empty()) {
          tree_slots(seq, static_cast<int>(t) - seq.token_begin, batch.positions, first, slots);
          cpu::tree_attention(q.data() + t * QD, NH, view, slots.data(), slots.size(), scale,
                              attn.data() + t * QD, scratch.data(), path);
          continue;
        }
        cpu::paged_attention(q.data() + t * QD, NH, view, first, pos, scale, attn.data() + t * QD,
                             scratch.data(), path, alibi);
      }
    });
    for (std::size_t s = 0; s < batch.sequences.size(); ++s) {
      if (batch.sequences[s].compress_evict > 0) {
        compress_layer_kv(batch.sequences[s], batch.positions, q.data(), NH, scale, kv_layer, kv,
                          path, &unit_scores[s]);
      }
    }
    cpu::matmul(attn.data(), T, L.o, bias_or_null(L.o_bias), attn_out.data(), &pool, path);
    if (auto ok = reduce(attn_out); !ok) return ok;
    // The MLP's input: parallel blocks read x as it came into the layer (through their own
    // norm, or the attention norm's output when they have none); sequential ones the sum.
    if (spec_.parallel_attention) {
      if (!L.mlp_norm.empty()) {
        mlp_in.resize(T * H);
        normalize(spec_, x.data(), T, L.mlp_norm, L.mlp_norm_bias, mlp_in.data(), path);
        h.swap(mlp_in);
      }
      // else h still holds the attention norm's output
    } else {
      for (std::size_t i = 0; i < T * H; ++i)
        x[i] += attn_out[i];
      if (post_norm) {
        normalize(spec_, x.data(), T, L.attn_norm, L.attn_norm_bias, x.data(), path);
        std::copy(x.begin(), x.end(), h.begin());
      } else {
        normalize(spec_, x.data(), T, L.mlp_norm, L.mlp_norm_bias, h.data(), path);
      }
    }
    const auto act = cpu_activation(spec_.activation);
    if (spec_.gated_mlp && L.gate_up.data != nullptr) {
      fused.resize(T * 2 * I);
      cpu::matmul(h.data(), T, L.gate_up, bias_or_null(L.gate_up_bias), fused.data(), &pool, path);
      for (std::size_t t = 0; t < T; ++t) {
        std::memcpy(gate.data() + t * I, fused.data() + t * 2 * I, I * sizeof(float));
        std::memcpy(up.data() + t * I, fused.data() + t * 2 * I + I, I * sizeof(float));
      }
      cpu::gated_activation(act, gate.data(), up.data(), T * I);
    } else if (spec_.gated_mlp) {
      const cpu::MatmulOutput gate_up[] = {{&L.gate, bias_or_null(L.gate_bias), gate.data()},
                                           {&L.up, bias_or_null(L.up_bias), up.data()}};
      cpu::matmul_group(h.data(), T, gate_up, &pool, path);
      cpu::gated_activation(act, gate.data(), up.data(), T * I);
    } else {
      cpu::matmul(h.data(), T, L.up, bias_or_null(L.up_bias), gate.data(), &pool, path);
      cpu::activate_inplace(act, gate.data(), T * I);
    }
    cpu::matmul(gate.data(), T, L.down, bias_or_null(L.down_bias), h.data(), &pool, path);
    if (auto ok = reduce(h); !ok) return ok;
    if (spec_.parallel_attention) {
      for (std::size_t i = 0; i < T * H; ++i)
        x[i] += attn_out[i] + h[i];
    } else {
      for (std::size_t i = 0; i < T * H; ++i)
        x[i] += h[i];
      if (post_norm) normalize(spec_, x.data(), T, L.mlp_norm, L.mlp_norm_bias, x.data(), path);
    }
  }

  for (std::size_t s = 0; s < batch.sequences.size(); ++s) {
    const auto& seq = batch.sequences[s];
    if (seq.compress_evict > 0 && seq.compress_heads_vary) {
      compress_kv_across_heads(seq, batch.positions, unit_scores[s], kv);
    }
  }
  if (!ends) {
    logits = std::move(x);  // the residual stream, for the next stage
    return {};
  }
  // Only the rows that need logits go through the final norm and the (large) lm head.
  std::vector<float> selected;
  for (const auto& seq : batch.sequences) {
    if (seq.token_count == 0) continue;
    const int first = seq.all_logits ? seq.token_begin : seq.token_begin + seq.token_count - 1;
    for (int i = first; i < seq.token_begin + seq.token_count; ++i) {
      const float* row = x.data() + static_cast<std::size_t>(i) * H;
      selected.insert(selected.end(), row, row + H);
    }
  }
  const std::size_t rows = selected.size() / H;
  h.resize(selected.size());
  if (final_norm_.empty()) {
    h = selected;  // post-norm networks end normalized
  } else {
    normalize(spec_, selected.data(), rows, final_norm_, final_norm_bias_, h.data(), path);
  }
  logits.resize(rows * static_cast<std::size_t>(spec_.vocab_size));
  cpu::matmul(h.data(), rows, lm_head_, nullptr, logits.data(), &pool, path);
  return {};
}

}  // namespace weft::model
