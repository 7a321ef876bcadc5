// Seq2SeqModel::encode and ::decode: the CPU forward pass of encoder-decoder networks
// (transformers' T5ForConditionalGeneration and M2M100ForConditionalGeneration, pre-norm:
// x + attn(norm(x)), x + cross(norm(x)), x + mlp(norm(x)); a final norm after each stack).

#include <algorithm>
#include <cmath>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/biased_attention.hpp"
#include "kernels/cpu/embedding.hpp"
#include "kernels/cpu/norm.hpp"
#include "runtime/model/seq2seq_model.hpp"
#include "runtime/model/seq2seq_positions.hpp"
#include "runtime/model/sequence_kv.hpp"

namespace weft::model {
namespace {

const float* bias_or_null(const std::vector<float>& b) {
  return b.empty() ? nullptr : b.data();
}

Error bad_input(const std::string& what) {
  return Error(ErrorCode::kInvalidArgument, what);
}

}  // namespace

float Seq2SeqModel::attention_scale(int head_dim) const {
  const double s = spec_.seq2seq.attention_scale;
  return s > 0 ? static_cast<float>(s) : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

void Seq2SeqModel::normalize(const Norm& n, const float* x, std::size_t tokens, float* out,
                             cpu::KernelPath path) const {
  const auto H = static_cast<std::size_t>(spec_.hidden_size);
  const auto eps = static_cast<float>(spec_.norm_epsilon);
  if (spec_.norm == model::Norm::kRms) {
    cpu::rms_norm(x, tokens, H, n.weight.data(), eps, out, path);
  } else {
    cpu::layer_norm(x, tokens, H, n.weight.data(), bias_or_null(n.bias), eps, out, path);
  }
}

void Seq2SeqModel::mlp(const Mlp& m, std::size_t intermediate, const float* x, std::size_t tokens,
                       float* out, cpu::ThreadPool& pool, cpu::KernelPath path) const {
  const auto act = cpu_activation(spec_.activation);
  std::vector<float> up(tokens * intermediate);
  if (spec_.gated_mlp) {
    std::vector<float> gate(tokens * intermediate);
    const cpu::MatmulOutput both[] = {{&m.gate, bias_or_null(m.gate_bias), gate.data()},
                                      {&m.up, bias_or_null(m.up_bias), up.data()}};
    cpu::matmul_group(x, tokens, both, &pool, path);
    cpu::gated_activation(act, gate.data(), up.data(), gate.size());
    up.swap(gate);
  } else {
    cpu::matmul(x, tokens, m.up, bias_or_null(m.up_bias), up.data(), &pool, path);
    cpu::activate_inplace(act, up.data(), up.size());
  }
  cpu::matmul(up.data(), tokens, m.down, bias_or_null(m.down_bias), out, &pool, path);
}

void Seq2SeqModel::embed(const std::int32_t* tokens, const std::int32_t* positions,
                         std::size_t count, float* x, cpu::KernelPath path) const {
  const auto H = static_cast<std::size_t>(spec_.hidden_size);
  const cpu::EmbeddingTable table{embedding_.dtype, embedding_.data,
                                  static_cast<std::size_t>(spec_.vocab_size), H};
  cpu::embed_tokens(table, tokens, count, static_cast<float>(spec_.embedding_scale), nullptr,
                    nullptr, 0, x, path);
  if (spec_.position != PositionEmbedding::kSinusoidal) return;
  // M2M100's create_position_ids_from_input_ids: token i reads row padding_idx + 1 + i, a pad
  // token the zero row padding_idx.
  const int pad = spec_.seq2seq.position_padding_idx;
  std::vector<float> row(H);
  for (std::size_t t = 0; t < count; ++t) {
    const int r = tokens[t] == pad ? pad : pad + 1 + positions[t];
    sinusoidal_position(r, H, pad, row.data());
    float* out = x + t * H;
    for (std::size_t j = 0; j < H; ++j)
      out[j] += row[j];
  }
}

Result<void> Seq2SeqModel::check_cross(const std::vector<CrossAttentionSlice>& cross,
                                       std::size_t sequences, const KvCache& kv) const {
  if (cross.size() != sequences) {
    return bad_input("the step has " + std::to_string(sequences) + " sequences but " +
                     std::to_string(cross.size()) + " cross-attention slices");
  }
  const auto& have = kv.layout();
  if (have.num_layers != spec_.num_layers || have.num_kv_heads != spec_.num_kv_heads ||
      have.head_dim != spec_.head_dim) {
    return bad_input("KV cache layout does not match the decoder (layers, heads, head_dim)");
  }
  for (std::size_t s = 0; s < cross.size(); ++s) {
    const auto& c = cross[s];
    const std::string where = "sequence " + std::to_string(s) + ": ";
    if (c.length <= 0) return bad_input(where + "has no encoder output (cross length 0)");
    if (static_cast<std::int64_t>(c.page_table.size()) * have.page_size < c.length) {
      return bad_input(where + "cross-attention pages hold " +
                       std::to_string(c.page_table.size() * have.page_size) +
                       " slots, fewer than " + "its " + std::to_string(c.length) +
                       " encoder tokens");
    }
    for (const auto page : c.page_table) {
      if (page < 0 || page >= kv.num_pages()) {
        return bad_input(where + "cross-attention page id " + std::to_string(page) +
                         " is not in [0, " + std::to_string(kv.num_pages()) + ")");
      }
    }
  }
  return {};
}

Result<void> Seq2SeqModel::encode(const EncodeBatch& batch,
                                  const std::vector<CrossAttentionSlice>& cross, KvCache& kv,
                                  cpu::ThreadPool& pool, cpu::KernelPath path,
                                  std::vector<float>* hidden) const {
  if (auto ok = check_cross(cross, batch.lengths.size(), kv); !ok) return ok;
  std::size_t covered = 0;
  for (std::size_t s = 0; s < batch.lengths.size(); ++s) {
    const int len = batch.lengths[s];
    const std::string where = "sequence " + std::to_string(s) + ": ";
    if (len <= 0) return bad_input(where + "is empty");
    if (cross[s].length != len) {
      return bad_input(where + "has " + std::to_string(len) + " tokens but its cross slice " +
                       std::to_string(cross[s].length));
    }
    if (covered + static_cast<std::size_t>(len) > batch.tokens.size()) {
      return bad_input(where + "runs past the batch's " + std::to_string(batch.tokens.size()) +
                       " tokens");
    }
    for (std::size_t t = covered; t < covered + static_cast<std::size_t>(len); ++t) {
      if (batch.tokens[t] < 0 || batch.tokens[t] >= spec_.vocab_size) {
        return bad_input(where + "token id " + std::to_string(batch.tokens[t]) +
                         " is outside the vocabulary [0, " + std::to_string(spec_.vocab_size) +
                         ")");
      }
    }
    covered += static_cast<std::size_t>(len);
  }
  if (covered != batch.tokens.size()) {
    return bad_input("encode batch sequences cover " + std::to_string(covered) + " of " +
                     std::to_string(batch.tokens.size()) + " tokens");
  }
  path = cpu::resolve(path);
  const auto& e = spec_.seq2seq;
  const std::size_t T = batch.tokens.size();
  const auto H = static_cast<std::size_t>(spec_.hidden_size);
  const auto NH = static_cast<std::size_t>(e.encoder_heads);
  const auto D = static_cast<std::size_t>(e.encoder_head_dim);
  const auto I = static_cast<std::size_t>(e.encoder_intermediate_size);
  const std::size_t QD = NH * D;

  std::vector<std::size_t> starts, seq_of(T);
  std::vector<std::int32_t> index_of(T);
  std::size_t longest = 0;
  for (std::size_t s = 0, at = 0; s < batch.lengths.size(); ++s) {
    starts.push_back(at);
    const auto len = static_cast<std::size_t>(batch.lengths[s]);
    for (std::size_t i = 0; i < len; ++i) {
      seq_of[at + i] = s;
      index_of[at + i] = static_cast<std::int32_t>(i);
    }
    at += len;
    longest = std::max(longest, len);
  }

  std::vector<float> x(T * H), h(T * H), q(T * QD), k(T * QD), v(T * QD), attn(T * QD);
  embed(batch.tokens.data(), index_of.data(), T, x.data(), path);
  // Each sequence's keys and values as one page of `length` slots (PagedKv's layout), so a
  // token attends over its whole sequence, both directions.
  std::vector<std::vector<float>> blocks(batch.lengths.size());
  const float scale = attention_scale(e.encoder_head_dim);
  const bool relative = !encoder_relative_bias_.empty();
  for (const EncoderLayer& L : encoder_layers_) {
    normalize(L.attn_norm, x.data(), T, h.data(), path);
    const cpu::MatmulOutput qkv[] = {{&L.attn.q, bias_or_null(L.attn.q_bias), q.data()},
                                     {&L.attn.k, bias_or_null(L.attn.k_bias), k.data()},
                                     {&L.attn.v, bias_or_null(L.attn.v_bias), v.data()}};
    cpu::matmul_group(h.data(), T, qkv, &pool, path);
    pack_sequence_kv(starts, batch.lengths, k.data(), v.data(), QD, NH, D, blocks);
    pool.parallel_for(T, [&](std::size_t begin, std::size_t end) {
      std::vector<float> scratch(longest), bias(relative ? NH * longest : 0);
      for (std::size_t t = begin; t < end; ++t) {
        const std::size_t s = seq_of[t];
        const auto len = static_cast<std::size_t>(batch.lengths[s]);
        if (relative) {
          const int i = index_of[t];
          for (std::size_t j = 0; j < len; ++j) {
            const auto bucket = static_cast<std::size_t>(relative_position_bucket(
                static_cast<int>(j) - i, true, e.relative_buckets, e.relative_max_distance));
            for (std::size_t hd = 0; hd < NH; ++hd)
              bias[hd * len + j] = encoder_relative_bias_[bucket * NH + hd];
          }
        }
        const void* page = blocks[s].data();
        const cpu::PagedKv view{&page, len, NH, D, KvDtype::kF32};
        cpu::biased_attention(q.data() + t * QD, NH, view, 0, len - 1, scale,
                              relative ? bias.data() : nullptr, attn.data() + t * QD,
                              scratch.data(), path);
      }
    });
    cpu::matmul(attn.data(), T, L.attn.o, bias_or_null(L.attn.o_bias), h.data(), &pool, path);
    for (std::size_t i = 0; i < T * H; ++i)
      x[i] += h[i];
    normalize(L.mlp_norm, x.data(), T, h.data(), path);
    std::vector<float> out(T * H);
    mlp(L.mlp, I, h.data(), T, out.data(), pool, path);
    for (std::size_t i = 0; i < T * H; ++i)
      x[i] += out[i];
  }
  normalize(encoder_final_norm_, x.data(), T, h.data(), path);

  // Every decoder layer's cross-attention keys and values, into the sequences' cross pages.
  const std::size_t DQD = static_cast<std::size_t>(spec_.num_heads) * spec_.head_dim;
  const auto page_size = static_cast<std::size_t>(kv.layout().page_size);
  std::vector<float> ck(T * DQD), cv(T * DQD);
  for (std::size_t l = 0; l < decoder_layers_.size(); ++l) {
    const auto& C = decoder_layers_[l].cross;
    const cpu::MatmulOutput kv_out[] = {{&C.k, bias_or_null(C.k_bias), ck.data()},
                                        {&C.v, bias_or_null(C.v_bias), cv.data()}};
    cpu::matmul_group(h.data(), T, kv_out, &pool, path);
    for (std::size_t t = 0; t < T; ++t) {
      const auto i = static_cast<std::size_t>(index_of[t]);
      const auto& table = cross[seq_of[t]].page_table;
      kv.store_token(table[i / page_size], static_cast<int>(l), static_cast<int>(i % page_size),
                     ck.data() + t * DQD, cv.data() + t * DQD);
    }
  }
  if (hidden != nullptr) *hidden = std::move(h);
  return {};
}

Result<void> Seq2SeqModel::decode(const StepBatch& batch,
                                  const std::vector<CrossAttentionSlice>& cross, KvCache& kv,
                                  std::vector<float>& logits, cpu::ThreadPool& pool,
                                  cpu::KernelPath path) const {
  if (auto ok = check_step_batch(spec_, batch, kv.layout(), kv.num_pages()); !ok) return ok;
  if (batch.has_token_tree()) {
    return bad_input(
        "token trees (speculative verification) are not supported by "
        "encoder-decoder models");
  }
  for (const auto& seq : batch.sequences) {
    if (seq.slot_offset != 0) {
      return bad_input(
          "KV compression (a sequence's slot offset) is not supported by "
          "encoder-decoder models");
    }
  }
  if (auto ok = check_cross(cross, batch.sequences.size(), kv); !ok) return ok;
  path = cpu::resolve(path);
  const auto& e = spec_.seq2seq;
  const std::size_t T = batch.tokens.size();
  const auto H = static_cast<std::size_t>(spec_.hidden_size);
  const auto NH = static_cast<std::size_t>(spec_.num_heads);
  const auto D = static_cast<std::size_t>(spec_.head_dim);
  const auto I = static_cast<std::size_t>(spec_.intermediate_size);
  const std::size_t QD = NH * D;
  const auto page_size = static_cast<std::size_t>(kv.layout().page_size);

  std::vector<std::size_t> seq_of(T);
  std::size_t longest = 0;
  for (std::size_t s = 0; s < batch.sequences.size(); ++s) {
    const auto& seq = batch.sequences[s];
    for (int i = seq.token_begin; i < seq.token_begin + seq.token_count; ++i) {
      seq_of[static_cast<std::size_t>(i)] = s;
      longest = std::max<std::size_t>(longest, batch.positions[static_cast<std::size_t>(i)] + 1);
    }
    longest = std::max<std::size_t>(longest, static_cast<std::size_t>(cross[s].length));
  }

  std::vector<float> x(T * H), h(T * H), q(T * QD), k(T * QD), v(T * QD), attn(T * QD);
  std::vector<float> out(T * H);
  embed(batch.tokens.data(), batch.positions.data(), T, x.data(), path);
  const float scale = attention_scale(spec_.head_dim);
  const bool relative = !decoder_relative_bias_.empty();
  for (std::size_t l = 0; l < decoder_layers_.size(); ++l) {
    const DecoderLayer& L = decoder_layers_[l];
    const auto layer = static_cast<int>(l);
    // Causal self-attention over the sequence's pages (this step's keys stored first).
    normalize(L.attn_norm, x.data(), T, h.data(), path);
    const cpu::MatmulOutput qkv[] = {{&L.self.q, bias_or_null(L.self.q_bias), q.data()},
                                     {&L.self.k, bias_or_null(L.self.k_bias), k.data()},
                                     {&L.self.v, bias_or_null(L.self.v_bias), v.data()}};
    cpu::matmul_group(h.data(), T, qkv, &pool, path);
    for (std::size_t t = 0; t < T; ++t) {
      const auto& seq = batch.sequences[seq_of[t]];
      const auto pos = static_cast<std::size_t>(batch.positions[t]);
      kv.store_token(seq.page_table[pos / page_size], layer, static_cast<int>(pos % page_size),
                     k.data() + t * QD, v.data() + t * QD);
    }
    const KvLayout& layout = kv.layout();
    pool.parallel_for(T, [&](std::size_t begin, std::size_t end) {
      std::vector<float> scratch(longest), bias(relative ? NH * longest : 0);
      std::vector<const void*> pages;
      for (std::size_t t = begin; t < end; ++t) {
        const auto& seq = batch.sequences[seq_of[t]];
        pages.clear();
        for (auto page : seq.page_table)
          pages.push_back(kv.layer_bytes(page, layer));
        const cpu::PagedKv view{pages.data(),          page_size, NH, D, layout.dtype,
                                layout.scales_offset()};
        const auto pos = static_cast<std::size_t>(batch.positions[t]);
        if (relative) {
          const std::size_t span = pos + 1;
          for (std::size_t j = 0; j < span; ++j) {
            const auto bucket = static_cast<std::size_t>(
                relative_position_bucket(static_cast<int>(j) - static_cast<int>(pos), false,
                                         e.relative_buckets, e.relative_max_distance));
            for (std::size_t hd = 0; hd < NH; ++hd)
              bias[hd * span + j] = decoder_relative_bias_[bucket * NH + hd];
          }
        }
        cpu::biased_attention(q.data() + t * QD, NH, view, 0, pos, scale,
                              relative ? bias.data() : nullptr, attn.data() + t * QD,
                              scratch.data(), path);
      }
    });
    cpu::matmul(attn.data(), T, L.self.o, bias_or_null(L.self.o_bias), out.data(), &pool, path);
    for (std::size_t i = 0; i < T * H; ++i)
      x[i] += out[i];

    // Cross-attention over the sequence's encoder output (no positions, no mask).
    normalize(L.cross_norm, x.data(), T, h.data(), path);
    cpu::matmul(h.data(), T, L.cross.q, bias_or_null(L.cross.q_bias), q.data(), &pool, path);
    pool.parallel_for(T, [&](std::size_t begin, std::size_t end) {
      std::vector<float> scratch(longest);
      std::vector<const void*> pages;
      for (std::size_t t = begin; t < end; ++t) {
        const auto& c = cross[seq_of[t]];
        pages.clear();
        for (auto page : c.page_table)
          pages.push_back(kv.layer_bytes(page, layer));
        const cpu::PagedKv view{pages.data(),          page_size, NH, D, layout.dtype,
                                layout.scales_offset()};
        cpu::biased_attention(q.data() + t * QD, NH, view, 0,
                              static_cast<std::size_t>(c.length) - 1, scale, nullptr,
                              attn.data() + t * QD, scratch.data(), path);
      }
    });
    cpu::matmul(attn.data(), T, L.cross.o, bias_or_null(L.cross.o_bias), out.data(), &pool, path);
    for (std::size_t i = 0; i < T * H; ++i)
      x[i] += out[i];

    normalize(L.mlp_norm, x.data(), T, h.data(), path);
    mlp(L.mlp, I, h.data(), T, out.data(), pool, path);
    for (std::size_t i = 0; i < T * H; ++i)
      x[i] += out[i];
  }

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
  normalize(decoder_final_norm_, selected.data(), rows, h.data(), path);
  if (e.lm_head_scale != 1.0) {
    // T5 with tied embeddings rescales the decoder's output by d_model^-0.5 (fp32 product).
    const auto s = static_cast<float>(e.lm_head_scale);
    for (float& f : h)
      f *= s;
  }
  logits.resize(rows * static_cast<std::size_t>(spec_.vocab_size));
  cpu::matmul(h.data(), rows, lm_head_, nullptr, logits.data(), &pool, path);
  return {};
}

}  // namespace weft::model
