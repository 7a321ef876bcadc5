// CudaSeq2Seq over the engine's pool of pages (cuda_seq2seq.hpp, make_page_pool and
// forward_pages): the same encoder and decoder passes as the requests' own caches
// (cuda_seq2seq.cpp), with each key's row found through a page table.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "runtime/model/cuda/cuda_seq2seq_state.hpp"
#include "runtime/model/seq2seq_backend.hpp"

namespace weft::model {
namespace {

Error bad_input(const std::string& what) {
  return Error(ErrorCode::kInvalidArgument, what);
}

// Pages that cover `length` positions, each inside the pool.
Result<void> check_pages(const std::vector<std::int32_t>& table, int length, int page_size,
                         int num_pages, const std::string& what) {
  for (const auto page : table) {
    if (page < 0 || page >= num_pages) {
      return bad_input(what + ": page id " + std::to_string(page) + " is not in [0, " +
                       std::to_string(num_pages) + ")");
    }
  }
  if (static_cast<std::int64_t>(table.size()) * page_size < length) {
    return bad_input(what + ": " + std::to_string(table.size()) + " pages of " +
                     std::to_string(page_size) + " do not hold " + std::to_string(length) +
                     " positions");
  }
  if (length > cuda::kSeq2SeqMaxKeys) {
    return bad_input(what + ": " + std::to_string(length) +
                     " positions is more than the CUDA encoder-decoder attention's " +
                     std::to_string(cuda::kSeq2SeqMaxKeys) + " keys");
  }
  return {};
}

}  // namespace

Result<int> CudaSeq2Seq::make_page_pool(int page_size, int num_pages, double gpu_memory_fraction) {
  State& s = *state_;
  if (s.pool_pages > 0) {
    return Error(ErrorCode::kInvalidArgument, "CUDA encoder-decoder model: the pool is made once");
  }
  if (page_size <= 0 || num_pages < 0) {
    return bad_input("a pool needs a page size above 0 and a page count of 0 or more, not " +
                     std::to_string(page_size) + " and " + std::to_string(num_pages));
  }
  if (auto err = cudaSetDevice(s.options.device); err != cudaSuccess) {
    return cuda_error(err, "selecting device " + std::to_string(s.options.device));
  }
  const ModelSpec& spec = s.model->spec();
  const std::size_t page_bytes = static_cast<std::size_t>(page_size) * 2 * spec.num_layers *
                                 spec.num_heads * spec.head_dim * cuda::kHalfBytes;
  int pages = num_pages;
  if (pages == 0) {
    std::size_t free_bytes = 0, total_bytes = 0;
    if (auto err = cudaMemGetInfo(&free_bytes, &total_bytes); err != cudaSuccess) {
      return cuda_error(err, "reading free device memory");
    }
    // What the fraction allows minus what is in use already (the weights, step buffers, the
    // CUDA context, anything else on the device).
    const double budget = static_cast<double>(total_bytes) * gpu_memory_fraction -
                          static_cast<double>(total_bytes - free_bytes);
    pages = static_cast<int>(std::min<double>(budget / static_cast<double>(page_bytes), 1 << 30));
    if (pages <= 0) {
      return Error(ErrorCode::kResourceExhausted,
                   "CUDA encoder-decoder model: gpu_memory_fraction " +
                       std::to_string(gpu_memory_fraction) + " of " +
                       std::to_string(total_bytes >> 20) +
                       " MiB leaves no room for KV pages after the weights and buffers (" +
                       std::to_string((total_bytes - free_bytes) >> 20) + " MiB in use)");
    }
  }
  if (auto err = s.pool.reserve(static_cast<std::size_t>(pages) * page_bytes); err != cudaSuccess) {
    return cuda_error(err, "allocating " + std::to_string(pages) + " KV pages of " +
                               std::to_string(page_bytes) + " bytes");
  }
  s.pool_pages = pages;
  s.page_size = page_size;
  return pages;
}

Result<void> CudaSeq2Seq::reserve_step_buffers(int tokens) {
  if (auto err = cudaSetDevice(state_->options.device); err != cudaSuccess) {
    return cuda_error(err, "selecting device " + std::to_string(state_->options.device));
  }
  return state_->reserve_step(tokens);
}

int CudaSeq2Seq::pool_pages() const noexcept {
  return state_->pool_pages;
}

Result<void> CudaSeq2Seq::forward_pages(const StepBatch& batch, std::vector<float>& logits) {
  State& s = *state_;
  logits.clear();
  if (s.pool_pages == 0) {
    return Error(ErrorCode::kInternal, "CUDA encoder-decoder model: no pool (make_page_pool)");
  }
  const ModelSpec& spec = s.model->spec();
  const auto& e = spec.seq2seq;
  const int ps = s.page_size;
  KvLayout layout = s.model->kv_layout(ps);
  layout.dtype = KvDtype::kBF16;
  if (auto ok = check_step_batch(spec, batch, layout, s.pool_pages); !ok) return ok;
  auto parts = split_seq2seq_step(batch);
  if (!parts) return parts.error();
  for (std::size_t i = 0; i < batch.sequences.size(); ++i) {
    const SequenceSlice& slice = batch.sequences[i];
    const std::string where = "slice " + std::to_string(i);
    if (!slice.tree_parent.empty()) {
      return bad_input(where +
                       ": token trees (speculative verification) are not supported by "
                       "encoder-decoder models");
    }
    if (slice.slot_offset != 0 || slice.compress_evict != 0) {
      return bad_input(where + ": KV compression is not supported by encoder-decoder models");
    }
    if (auto ok = check_pages(slice.cross_page_table, slice.cross_length, ps, s.pool_pages,
                              where + "'s cross-attention pages");
        !ok) {
      return ok;
    }
    if (slice.token_count > 0) {
      const int last =
          batch.positions[static_cast<std::size_t>(slice.token_begin + slice.token_count - 1)];
      if (auto ok = check_pages(slice.page_table, last + 1, ps, s.pool_pages, where); !ok) {
        return ok;
      }
    }
  }
  for (const auto id : parts->encode.tokens) {
    if (id < 0 || id >= spec.vocab_size) {
      return bad_input("encoder token id " + std::to_string(id) +
                       " is outside the vocabulary [0, " + std::to_string(spec.vocab_size) + ")");
    }
  }
  if (auto err = cudaSetDevice(s.options.device); err != cudaSuccess) {
    return cuda_error(err, "selecting device " + std::to_string(s.options.device));
  }

  const int H = spec.hidden_size;
  const int QDe = e.encoder_heads * e.encoder_head_dim;
  const int QD = spec.num_heads * spec.head_dim;
  const std::size_t cache_row = static_cast<std::size_t>(2) * spec.num_layers * QD;
  const std::size_t row_bytes = cache_row * cuda::kHalfBytes;
  std::byte* pool = s.pool.as<std::byte>();
  // A position's row in the pool through its page table.
  auto slot_row = [&](const std::vector<std::int32_t>& table, int position) {
    const std::size_t slot =
        static_cast<std::size_t>(table[static_cast<std::size_t>(position / ps)]) * ps +
        static_cast<std::size_t>(position % ps);
    return static_cast<void*>(pool + slot * row_bytes);
  };
  cudaStream_t stream = s.stream;
  bool ok = true;

  // The encoder over the new sources, packed, their keys and values into their cross pages.
  const EncodeBatch& encode = parts->encode;
  if (!encode.lengths.empty()) {
    const int T = static_cast<int>(encode.tokens.size());
    const int longest = *std::max_element(encode.lengths.begin(), encode.lengths.end());
    if (auto r = s.reserve_step(T); !r) return r.error();
    if (auto r = s.ensure_positions(e.position_padding_idx + 2 + longest); !r) return r.error();
    std::vector<std::int32_t> table_rows;
    std::vector<cuda::Seq2SeqAttentionRow> rows;
    std::vector<void*> dst;
    float* wide = s.wide.as<float>();
    std::size_t at = 0;
    for (std::size_t i = 0; i < encode.lengths.size(); ++i) {
      const int n = encode.lengths[i];
      for (int j = 0; j < n; ++j) {
        table_rows.push_back(seq2seq_position_row(spec, encode.tokens[at + j], j));
        rows.push_back({wide + at * 3 * static_cast<std::size_t>(QDe), n, j});
        dst.push_back(slot_row(parts->encode_cross[i].page_table, j));
      }
      at += static_cast<std::size_t>(n);
    }
    const Result<void> uploads[] = {upload_step_data(encode.tokens, s.tokens_d, stream),
                                    upload_step_data(table_rows, s.table_rows_d, stream),
                                    upload_step_data(rows, s.rows_d, stream),
                                    upload_step_data(dst, s.dst_d, stream)};
    for (const auto& r : uploads) {
      if (!r) return r.error();
    }
    ok &= seq2seq_encoder_pass(s, T, longest);
    ok &= seq2seq_cross_kv_pass(s, T);
    if (!ok) return Error(ErrorCode::kInternal, "cuBLAS: a matrix product failed in the encoder");
  }

  // The decoder tokens: each slice's page tables uploaded once, its rows pointing into them.
  const int R = static_cast<int>(batch.tokens.size());
  if (R == 0) {
    if (auto err = cudaStreamSynchronize(stream); err != cudaSuccess) {
      return cuda_error(err, "running the encoder");
    }
    return {};
  }
  std::vector<std::int32_t> tables;
  std::vector<std::size_t> self_at, cross_at;
  for (const SequenceSlice& slice : batch.sequences) {
    self_at.push_back(tables.size());
    tables.insert(tables.end(), slice.page_table.begin(), slice.page_table.end());
    cross_at.push_back(tables.size());
    tables.insert(tables.end(), slice.cross_page_table.begin(), slice.cross_page_table.end());
  }
  if (auto err = s.pages_d.reserve(tables.size() * sizeof(std::int32_t)); err != cudaSuccess) {
    return cuda_error(err, "allocating a step's page tables");
  }
  if (auto r = s.reserve_step(R); !r) return r.error();
  int longest_self = 0, longest_cross = 0, last_position = 0;
  std::vector<std::int32_t> table_rows(static_cast<std::size_t>(R));
  std::vector<cuda::Seq2SeqAttentionRow> self_rows(static_cast<std::size_t>(R)),
      cross_rows(static_cast<std::size_t>(R));
  std::vector<void*> dst(static_cast<std::size_t>(R));
  std::vector<int> logit_rows;
  const auto* tables_d = s.pages_d.as<std::int32_t>();
  for (std::size_t i = 0; i < batch.sequences.size(); ++i) {
    const SequenceSlice& slice = batch.sequences[i];
    for (int k = 0; k < slice.token_count; ++k) {
      const auto t = static_cast<std::size_t>(slice.token_begin + k);
      const int position = batch.positions[t];
      table_rows[t] = seq2seq_position_row(spec, batch.tokens[t], position);
      self_rows[t] = {pool, position + 1, position, tables_d + self_at[i]};
      cross_rows[t] = {pool, slice.cross_length, 0, tables_d + cross_at[i]};
      dst[t] = slot_row(slice.page_table, slice.kv_slot(k, position));
      longest_self = std::max(longest_self, position + 1);
      last_position = std::max(last_position, position);
      if (slice.all_logits || k + 1 == slice.token_count) logit_rows.push_back(static_cast<int>(t));
    }
    longest_cross = std::max(longest_cross, slice.cross_length);
  }
  if (auto r = s.ensure_positions(e.position_padding_idx + 2 + last_position); !r) {
    return r.error();
  }
  const Result<void> uploads[] = {upload_step_data(batch.tokens, s.tokens_d, stream),
                                  upload_step_data(table_rows, s.table_rows_d, stream),
                                  upload_step_data(self_rows, s.rows_d, stream),
                                  upload_step_data(cross_rows, s.cross_rows_d, stream),
                                  upload_step_data(dst, s.dst_d, stream),
                                  upload_step_data(tables, s.pages_d, stream)};
  for (const auto& r : uploads) {
    if (!r) return r.error();
  }
  ok &= seq2seq_decoder_pass(s, R, longest_self, longest_cross, ps);

  // The lm head over the rows that give logits: all of them in a decode step, else each
  // slice's last (or every) row gathered first.
  const int G = static_cast<int>(logit_rows.size());
  const int V = spec.vocab_size;
  const std::size_t logit_bytes = static_cast<std::size_t>(G) * V * sizeof(float);
  if (auto err = s.logits_d.reserve(logit_bytes); err != cudaSuccess) {
    return cuda_error(err, "allocating logits for " + std::to_string(G) + " rows");
  }
  bool every_row = G == R;
  for (int g = 0; every_row && g < G; ++g)
    every_row = logit_rows[static_cast<std::size_t>(g)] == g;
  const void* head_input = s.h.get();
  if (!every_row) {
    const std::size_t h_row = static_cast<std::size_t>(H) * cuda::kHalfBytes;
    if (auto err = s.head_in.reserve(static_cast<std::size_t>(G) * h_row); err != cudaSuccess) {
      return cuda_error(err, "allocating the lm head's rows");
    }
    for (int g = 0; g < G; ++g) {
      if (auto err = cudaMemcpyAsync(
              s.head_in.as<std::byte>() + static_cast<std::size_t>(g) * h_row,
              s.h.as<std::byte>() +
                  static_cast<std::size_t>(logit_rows[static_cast<std::size_t>(g)]) * h_row,
              h_row, cudaMemcpyDeviceToDevice, stream);
          err != cudaSuccess) {
        return cuda_error(err, "gathering the lm head's rows");
      }
    }
    head_input = s.head_in.get();
  }
  if (G > 0) ok &= seq2seq_lm_head_pass(s, head_input, G);
  if (!ok) return Error(ErrorCode::kInternal, "cuBLAS: a matrix product failed in the decoder");
  if (auto err = cudaGetLastError(); err != cudaSuccess) {
    return cuda_error(err, "launching the encoder-decoder kernels");
  }
  logits.resize(static_cast<std::size_t>(G) * V);
  if (G > 0) {
    if (auto err = cudaMemcpyAsync(logits.data(), s.logits_d.get(), logit_bytes,
                                   cudaMemcpyDeviceToHost, stream);
        err != cudaSuccess) {
      return cuda_error(err, "copying logits back");
    }
  }
  if (auto err = cudaStreamSynchronize(stream); err != cudaSuccess) {
    return cuda_error(err, "running the encoder-decoder step");
  }
  return {};
}

}  // namespace weft::model
