// CudaModel: the forward pass as a sequence of kernel launches on one stream
// (kernels/cuda/*); creation and weight upload are in cuda_model_load.cpp, the GPU sampler's
// host side in cuda_sampling.cpp.

#include "runtime/model/cuda/cuda_model.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>

#include "kernels/cuda/alibi_attention.hpp"
#include "kernels/cuda/chain_feed.hpp"
#include "kernels/cuda/convert.hpp"
#include "kernels/cuda/embedding.hpp"
#include "kernels/cuda/gemv_rows.hpp"
#include "kernels/cuda/l2_prefetch.hpp"
#include "kernels/cuda/learned_positions.hpp"
#include "kernels/cuda/norm.hpp"
#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/residual_norm.hpp"
#include "kernels/cuda/rope.hpp"
#include "kernels/cuda/stream_fence.hpp"
#include "runtime/model/cuda/cuda_model_state.hpp"

namespace weft::model {

namespace {

// The batch checks against the whole model's layer count (a stage's pool holds fewer).
Result<void> check_stage_batch(const CudaModel::State& s, const StepBatch& batch) {
  KvLayout whole = s.layout;
  whole.num_layers = s.spec.num_layers;
  return check_step_batch(s.spec, batch, whole, s.num_pages);
}

Result<void> refuse_partial(const CudaModel::State& s) {
  if (s.embeds && s.ends) return {};
  return Error(ErrorCode::kInvalidArgument,
               "this CUDA model holds layers [" + std::to_string(s.first_layer) + ", " +
                   std::to_string(s.first_layer + s.layout.num_layers) +
                   ") of a pipeline: it runs through forward_layers");
}

}  // namespace

Result<void> CudaModel::forward(const StepBatch& batch, std::vector<float>& logits) {
  state_->launched_rows = -1;  // a step launched before is no longer there to sample
  if (auto ok = refuse_partial(*state_); !ok) return ok;
  if (batch.has_token_tree() && !supports_token_trees()) {
    return Error(ErrorCode::kInvalidArgument,
                 "token trees on an ALiBi model (Bloom): tree attention has no ALiBi bias yet "
                 "(speculate with a tree width of 1)");
  }
  if (auto ok = check_stage_batch(*state_, batch); !ok) return ok;
  return state_->run(batch, logits);
}

LayerRange CudaModel::layers() const noexcept {
  return {state_->first_layer, state_->layout.num_layers};
}

Result<void> CudaModel::forward_layers(const StepBatch& batch, std::span<const float> hidden_in,
                                       std::vector<float>& out) {
  State& s = *state_;
  s.launched_rows = -1;
  if (batch.has_token_tree()) {
    return Error(ErrorCode::kInvalidArgument,
                 "token trees need tree attention, which the CUDA model does not have yet");
  }
  if (auto ok = check_stage_batch(s, batch); !ok) return ok;
  const std::size_t want = batch.tokens.size() * static_cast<std::size_t>(s.spec.hidden_size);
  if (!s.embeds && hidden_in.size() != want) {
    return Error(ErrorCode::kInvalidArgument,
                 "a stage from layer " + std::to_string(s.first_layer) + " takes " +
                     std::to_string(want) + " hidden values from the stage before, got " +
                     std::to_string(hidden_in.size()));
  }
  s.stage_in = s.embeds ? nullptr : hidden_in.data();
  s.stage_out = s.ends ? nullptr : &out;
  auto ran = s.run(batch, out);
  s.stage_in = nullptr;
  s.stage_out = nullptr;
  return ran;
}

Result<void> CudaModel::launch(const StepBatch& batch) {
  state_->launched_rows = -1;
  if (batch.has_token_tree() && !supports_token_trees()) {
    return Error(ErrorCode::kInvalidArgument,
                 "token trees on an ALiBi model (Bloom): tree attention has no ALiBi bias yet");
  }
  if (auto ok = refuse_partial(*state_); !ok) return ok;
  if (auto ok = check_stage_batch(*state_, batch); !ok) return ok;
  std::vector<float> unused;
  if (auto r = state_->run(batch, unused, false); !r) return r;
  state_->launched_rows = batch.logit_rows();
  return {};
}

namespace {

// CudaModelOptions::row_kernel_tokens, or WEFT_ROW_KERNEL_TOKENS where set; at most
// cuda::kGemvRowsMax.
int row_kernel_limit(const CudaModelOptions& options) {
  static const int env = [] {
    const char* v = std::getenv("WEFT_ROW_KERNEL_TOKENS");
    return v != nullptr ? std::atoi(v) : -1;
  }();
  return std::clamp(env >= 0 ? env : options.row_kernel_tokens, 0, cuda::kGemvRowsMax);
}

}  // namespace

int CudaModel::exact_verify_rows() const noexcept {
  return row_kernel_limit(state_->options);
}

bool CudaModel::runs_greedy_chains() const noexcept {
  return state_->tensor_parallel == nullptr;
}

Result<void> CudaModel::greedy_chain(const StepBatch& first, int steps,
                                     std::vector<std::int32_t>& tokens) {
  state_->launched_rows = -1;
  if (auto ok = refuse_partial(*state_); !ok) return ok;
  if (first.has_token_tree()) {
    return Error(ErrorCode::kInvalidArgument, "a greedy chain's first step has a token tree");
  }
  if (auto ok = check_stage_batch(*state_, first); !ok) return ok;
  return state_->greedy_chain(first, steps, tokens);
}

bool CudaModel::supports_token_trees() const noexcept {
  return state_->alibi_slopes.get() == nullptr;
}

Result<void> CudaModel::sample(const DeviceSamplingInput& input, DeviceSamplingOutput& output) {
  return state_->sample(input, output);
}

Result<void> CudaModel::State::run(const StepBatch& batch, std::vector<float>& logits_out,
                                   bool copy_logits) {
  const int T = static_cast<int>(batch.tokens.size());
  const int S = static_cast<int>(batch.sequences.size());
  const int V = spec.vocab_size;
  if (T == 0) {
    logits_out.clear();
    return {};
  }
  if (auto err = cudaSetDevice(options.device); err != cudaSuccess) {
    return cuda_error(err, "selecting device " + std::to_string(options.device));
  }
  if (meta_pending) {
    // The step before was enqueued without a wait (a greedy chain): its metadata upload must
    // have left meta_host before this step writes it.
    meta_pending = false;
    if (auto err = cudaEventSynchronize(meta_event); err != cudaSuccess) {
      return cuda_error(err, "waiting for the previous step's metadata upload");
    }
  }
  if (auto r = reserve_step(T); !r) return r;

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
  // Decode steps of up to 64 tokens are latency-bound between their products: while the small
  // kernels run, a side stream asks L2 to fetch the first 8 MB of the next product's weights
  // (kernels/cuda/l2_prefetch.hpp; 8 MB measured best on the H100, docs/cuda.md). For
  // comparisons, WEFT_L2_PREFETCH_MB sets the MB per range (0: off): one number, or four (qkv
  // and lm_head, o, gate_up, down); WEFT_L2_PREFETCH_TOKENS the largest step that prefetches.
  enum PrefetchRange { kQkvOrHead, kO, kGateUp, kDown };
  static const std::array<std::size_t, 4> prefetch_cap = [] {
    std::array<std::size_t, 4> mb{8, 8, 8, 8};
    if (const char* v = std::getenv("WEFT_L2_PREFETCH_MB")) {
      int got[4] = {0, 0, 0, 0};
      const int n = std::sscanf(v, "%d,%d,%d,%d", &got[0], &got[1], &got[2], &got[3]);
      for (int k = 0; k < 4; ++k)
        mb[k] = static_cast<std::size_t>(std::max(0, got[n == 4 ? k : 0]));
    }
    for (auto& m : mb)
      m <<= 20;
    return mb;
  }();
  // Tensor parallel (docs/parallel.md): the prefetches that run beside an all-reduce (gate_up's
  // beside o's, the next layer's qkv or the head's beside down's) have the all-reduce's
  // latency to fill, memory otherwise idle: WEFT_TP_PREFETCH_MB per range (default 16; 0: the
  // single-GPU caps). WEFT_TP_OVERLAP=0 forks the next qkv's prefetch after down's all-reduce
  // (the single-GPU order), for comparisons.
  static const std::size_t tp_prefetch_cap = [] {
    const char* v = std::getenv("WEFT_TP_PREFETCH_MB");
    return static_cast<std::size_t>(std::max(0, v != nullptr ? std::atoi(v) : 16)) << 20;
  }();
  static const bool tp_overlap = [] {
    const char* v = std::getenv("WEFT_TP_OVERLAP");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  static const int prefetch_tokens = [] {
    const char* v = std::getenv("WEFT_L2_PREFETCH_TOKENS");
    return v != nullptr ? std::atoi(v) : 64;
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
  const auto* dev_f = meta.as<float>();
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

  const cuda::Precision P = options.precision;
  const int H = spec.hidden_size, I = spec.intermediate_size;
  const int QD = spec.q_dim(), KVD = spec.kv_dim();
  const int qkv_width = QD + 2 * KVD;
  const int mlp_width = spec.gated_mlp ? 2 * I : I;
  const auto norm_kind = spec.norm == Norm::kRms ? cuda::NormKind::kRms : cuda::NormKind::kLayer;
  const auto eps = static_cast<float>(spec.norm_epsilon);
  auto or_null = [](const DeviceBuffer& b) { return b.as<float>(); };
  bool blas_ok = true;
  // While profiling (set_kernel_profiling), steps record an event after each kernel class.
  marks_used = 0;
  auto mark = [&](const char* what) {
    if (!profiling) return;
    if (marks_used == marks.size()) {
      cudaEvent_t e = nullptr;
      if (cudaEventCreate(&e) != cudaSuccess) return;
      marks.emplace_back(what, e);
    }
    marks[marks_used].first = what;
    cudaEventRecord(marks[marks_used].second, stream);
    ++marks_used;
  };
  // Tensor parallel: o's and down's outputs are this rank's partial sums; the group adds them
  // up in place (on `stream`, so inside a captured graph too) before any bias or residual add.
  bool reduce_ok = true;
  // `sixteen`: the product wrote bf16 rows into delta16 (row_parallel_product): they are summed
  // as bf16, half the bytes, and widened into `delta`.
  auto all_reduce_delta = [&](bool sixteen) {
    if (tensor_parallel == nullptr) return;
    const auto n = static_cast<std::size_t>(T) * H;
    // NCCL's symmetric kernels may start before the product's writes are flushed (tp_fence).
    if (tp_fence && !(sixteen ? delta16 : delta).owned()) cuda::stream_fence(stream);
    if (sixteen) {
      reduce_ok &= static_cast<bool>(tensor_parallel->all_reduce_sum_bf16(
          std::span<std::uint16_t>(delta16.as<std::uint16_t>(), n)));
      cuda::convert_to_f32(delta16.get(), P, delta.as<float>(), n, stream);
    } else {
      reduce_ok &= static_cast<bool>(
          tensor_parallel->all_reduce_sum(std::span<float>(delta.as<float>(), n)));
    }
    mark("all-reduce");
  };

  // L2 prefetch of the next product's weights on the side stream, forked from `stream` here
  // (see prefetch_cap); joined back at the end of the step.
  const bool prefetching = tile_count == 0 && T <= prefetch_tokens && side_stream != nullptr;
  bool forked = false;
  // `beside_reduce`: the prefetch runs beside a tensor-parallel all-reduce (tp_prefetch_cap).
  auto prefetch_at = [&](PrefetchRange which, const void* w, std::size_t elements,
                         bool beside_reduce = false) {
    std::size_t cap = prefetch_cap[which];
    if (beside_reduce && tensor_parallel != nullptr && tp_prefetch_cap > 0 && cap > 0) {
      cap = tp_prefetch_cap;  // WEFT_L2_PREFETCH_MB=0 still turns it off
    }
    if (!prefetching || w == nullptr || cap == 0) return;
    cudaEventRecord(fork_event, stream);
    cudaStreamWaitEvent(side_stream, fork_event, 0);
    cuda::l2_prefetch(w, std::min(elements * 2, cap), side_stream);  // 16-bit
    forked = true;
  };
  auto prefetch = [&](PrefetchRange which, const DeviceBuffer& w, std::size_t elements,
                      bool beside_reduce = false) {
    prefetch_at(which, w.get(), elements, beside_reduce);
  };

  // Quantized weights (docs/quantization.md): steps of up to kQuantChunkedTokens tokens read
  // them through cuda::quant_gemv, 8 tokens per pass (reading the weights once per 8 tokens
  // costs less than dequantizing them, by the count of bytes moved, to about 24 tokens); larger
  // ones dequantize the matrix (in row chunks that fit the scratch buffer) and multiply the 16-bit
  // rows through cuBLAS.
  constexpr int kQuantChunkedTokens = 3 * cuda::kQuantGemvMaxTokens;  // 24
  const bool quant_step = quant_format.has_value() && T <= kQuantChunkedTokens;
  auto uses_quant = [&](const DeviceBuffer& wq) { return quant_step && wq.get() != nullptr; };
  // The decode rows' products through the row kernel (CudaModelOptions::row_kernel_tokens):
  // alone when the step has nothing else, else after cuBLAS has computed every row.
  const int row_limit = row_kernel_limit(options);
  const bool row_kernel = decode_count >= 1 && decode_count <= row_limit;
  auto product = [&](const void* in_x, int tokens, const DeviceBuffer& w16, const DeviceBuffer& wq,
                     int out_features, int in_features, float* y, int ldy,
                     bool head = false) -> bool {
    if (wq.get() != nullptr && quant_format) {
      const cuda::QuantMatrixView view{wq.get(), *quant_format, out_features, in_features};
      if (tokens <= kQuantChunkedTokens && cuda::quant_gemv_supported(in_x, 1, view)) {
        for (int t0 = 0; t0 < tokens; t0 += cuda::kQuantGemvMaxTokens) {
          const int n = std::min(cuda::kQuantGemvMaxTokens, tokens - t0);
          cuda::quant_gemv(static_cast<const std::byte*>(in_x) +
                               static_cast<std::size_t>(t0) * in_features * cuda::kHalfBytes,
                           n, view, y + static_cast<std::size_t>(t0) * ldy, ldy, P, stream);
        }
        return true;
      }
      const int chunk = static_cast<int>(std::min<std::size_t>(
          dequant_scratch.bytes() / (static_cast<std::size_t>(in_features) * cuda::kHalfBytes),
          static_cast<std::size_t>(out_features)));
      bool ok = chunk > 0;
      for (int r0 = 0; ok && r0 < out_features; r0 += chunk) {
        const int n = std::min(chunk, out_features - r0);
        cuda::quant_dequantize(view, r0, n, dequant_scratch.get(), P, stream);
        ok = blas->linear(in_x, tokens, dequant_scratch.get(), n, in_features, y + r0, ldy, P,
                          stream);
      }
      return ok;
    }
    const int decode_rows = head ? head_decode_rows : decode_count;
    if (row_kernel && decode_rows > 0 && w16.get() != nullptr &&
        cuda::gemv_rows_supported(in_x, decode_rows, w16.get(), in_features)) {
      if (decode_rows == tokens) {
        cuda::gemv_rows(in_x, tokens, nullptr, w16.get(), out_features, in_features, y, ldy, P,
                        stream);
        return true;
      }
      const bool ok =
          blas->linear(in_x, tokens, w16.get(), out_features, in_features, y, ldy, P, stream);
      cuda::gemv_rows(in_x, decode_rows, dev + (head ? L.head_rows : L.row_list), w16.get(),
                      out_features, in_features, y, ldy, P, stream);
      return ok;
    }
    return blas->linear(in_x, tokens, w16.get(), out_features, in_features, y, ldy, P, stream);
  };
  // o's and down's products (H outputs), all-reduced next under tensor parallelism: into
  // `delta`, or with a bf16 all-reduce (set_tensor_parallel, WEFT_TP_BF16_REDUCE_TOKENS) for
  // steps of that many tokens or more, as bf16 rows into delta16 (the rows the next norm
  // rounds to bf16 anyway; the residual stays fp32). Returns whether it wrote delta16.
  // Steps of up to tp_fused_rows tokens on pre-norm sequential layers: every all-reduce is
  // fused with the add_norm after it (cuda_model_tp_fused.cpp).
  const bool fused = tensor_parallel != nullptr && tp_fused_rows > 0 && T <= tp_fused_rows &&
                     spec.norm_placement != NormPlacement::kPost && !spec.parallel_attention;
  int fused_slot = 0;  // o's products into slot 0, down's into slot 1
  auto fused_slot_rows = [&] {
    return reinterpret_cast<float*>(reinterpret_cast<char*>(tp_fused_base) +
                                    static_cast<std::size_t>(fused_slot) * tp_fused_slot_bytes);
  };
  // The sum over the group of the rows in slot `fused_slot`, added (with `delta_bias`) to the
  // residual and normalized by `weight`/`bias` into h, as add_norm; a null weight: the sum
  // alone into `delta` (the last layer's, for the final norm). Flips the slot.
  auto fused_reduce = [&](const float* delta_bias, const DeviceBuffer* weight,
                          const DeviceBuffer* bias) {
    cuda::AllReduceNormArgs f;
    f.group = tp_fused;
    f.offset = static_cast<std::size_t>(fused_slot) * tp_fused_slot_bytes;
    f.rows = T;
    f.n = H;
    if (weight != nullptr) {
      f.residual = x.as<float>();
      f.delta_bias = delta_bias;
      f.kind = norm_kind;
      f.weight = weight->as<float>();
      f.bias = or_null(*bias);
      f.eps = eps;
      f.out = h.get();
      f.precision = P;
    } else {
      f.sum_out = delta.as<float>();
    }
    reduce_ok &= cuda::allreduce_add_norm(f, stream);
    fused_slot ^= 1;
    mark("fused all-reduce + norm");
  };
  const bool reduce16 = !fused && tensor_parallel != nullptr && bf16_reduce_tokens > 0 &&
                        T >= bf16_reduce_tokens && P == cuda::Precision::kBF16 &&
                        !blas->small_step(T) &&
                        delta16.bytes() >= static_cast<std::size_t>(T) * H * cuda::kHalfBytes;
  // Under the fused all-reduce and norm (tp_fused_*, WEFT_TP_FUSED_NORM), o's and down's
  // products write into the window's slot `fused_slot` instead, and fused_reduce sums them.
  auto row_parallel_product = [&](const void* in, const DeviceBuffer& w16, const DeviceBuffer& wq,
                                  int in_features) -> bool {
    if (reduce16 && wq.get() == nullptr) {
      blas_ok &= blas->linear16(in, T, w16.get(), H, in_features, delta16.get(), H, P, stream);
      return true;
    }
    blas_ok &=
        product(in, T, w16, wq, H, in_features, fused ? fused_slot_rows() : delta.as<float>(), H);
    return false;
  };
  // A 16-bit matrix for cuBLAS: w16, or a quantized matrix dequantized into the scratch buffer
  // (which holds any layer matrix whole).
  auto dense16 = [&](const DeviceBuffer& w16, const DeviceBuffer& wq, int out_rows,
                     int cols) -> const void* {
    if (wq.get() == nullptr || !quant_format) return w16.get();
    cuda::quant_dequantize({wq.get(), *quant_format, out_rows, cols}, 0, out_rows,
                           dequant_scratch.get(), P, stream);
    return dequant_scratch.get();
  };
  // An L2 prefetch of a matrix reads its quantized codes when the step uses them (counted in
  // 16-bit elements, as prefetch takes them).
  auto prefetch_matrix = [&](PrefetchRange which, const DeviceBuffer& w16, const DeviceBuffer& wq,
                             std::size_t out_rows, std::size_t cols, bool beside_reduce = false) {
    if (!uses_quant(wq)) return prefetch(which, w16, out_rows * cols, beside_reduce);
    prefetch(which, wq, cuda::quant_matrix_layout(*quant_format, out_rows, cols).code_bytes() / 2,
             beside_reduce);
  };
  // Vocab-parallel head (set_tensor_parallel): this rank multiplies rows [r * Vs, r * Vs + mine)
  // of the (replicated) head into head_shard; an all-gather and a 2D copy per rank put every
  // rank's columns into `logits`. Only for a 16-bit head.
  const DeviceBuffer& head = lm_head.get() != nullptr ? lm_head : embedding;
  const bool vocab_split =
      vocab_parallel && tensor_parallel != nullptr && lm_head_q.get() == nullptr;
  const int tp_ranks = tensor_parallel != nullptr ? tensor_parallel->size() : 1;
  const int tp_rank = tensor_parallel != nullptr ? tensor_parallel->rank() : 0;
  const int Vs = (V + tp_ranks - 1) / tp_ranks;
  const int head_mine = vocab_split ? std::max(0, std::min(Vs, V - tp_rank * Vs)) : V;
  const void* head_rows =
      vocab_split
          ? static_cast<const void*>(static_cast<const std::byte*>(head.get()) +
                                     static_cast<std::size_t>(tp_rank) * Vs * H * cuda::kHalfBytes)
          : head.get();
  float* const shard_out = head_in_window ? head_window_shard : head_shard.as<float>();
  float* const gathered = head_in_window ? head_window_gathered : head_gathered.as<float>();
  // The next layer's qkv, or after the last layer the head (this rank's rows of it).
  auto prefetch_next = [&](std::size_t l, bool beside_reduce) {
    if (l + 1 < layers.size()) {
      prefetch_matrix(kQkvOrHead, layers[l + 1].qkv, layers[l + 1].qkv_q,
                      static_cast<std::size_t>(qkv_width), H, beside_reduce);
    } else if (vocab_split) {
      prefetch_at(kQkvOrHead, head_rows, static_cast<std::size_t>(head_mine) * H, beside_reduce);
    } else {
      prefetch_matrix(kQkvOrHead, head, lm_head_q, static_cast<std::size_t>(V), H, beside_reduce);
    }
  };
  // Under tensor parallelism the next qkv's prefetch is forked before down's all-reduce.
  const bool early_next_prefetch = tensor_parallel != nullptr && tp_overlap;

  // Pre-norm sequential layers (Llama and most families) defer each layer's last residual add
  // into the next layer's fused add_norm; post-norm and parallel-attention layers (OPT-350m,
  // Falcon) finish their residual within the layer instead (residual_norm.hpp).
  const bool post_norm = spec.norm_placement == NormPlacement::kPost;
  const bool deferred_residual = !post_norm && !spec.parallel_attention;
  const bool alibi = alibi_slopes.get() != nullptr;
  if (alibi && kv_dtype_scaled(layout.dtype)) {
    return Error(ErrorCode::kUnsupported,
                 "ALiBi attention (Bloom) reads 16-bit KV pages only; run with "
                 "--kv-cache-dtype auto");
  }

  // One layer's attention: bias, rope and KV store, then the attention kernels, into `attn`.
  auto attend = [&](std::size_t l, const Layer& W) {
    cuda::RopeArgs ra;
    ra.qkv = qkv_out.as<float>();
    ra.qkv_bias = or_null(W.qkv_bias);
    ra.num_heads = spec.num_heads;
    ra.rotary_dim = R;
    ra.interleaved = spec.rope.order == RopeOrder::kInterleaved;
    ra.inv_freq = dev_f + L.inv_freq;
    ra.attention_factor = dev_f + L.factor;
    ra.positions = dev + L.positions;
    kvv.layer_offset = l * (layout.bytes_per_layer_block() / element_bytes);
    cuda::AttentionArgs aa;
    aa.q = qkv_out.as<float>();
    aa.q_stride = static_cast<std::size_t>(qkv_width);
    aa.num_heads = spec.num_heads;
    aa.scale = 1.0f / std::sqrt(static_cast<float>(spec.head_dim));
    aa.sliding_window =
        spec.layer_uses_window(first_layer + static_cast<int>(l)) ? spec.sliding_window : 0;
    aa.out = attn.get();
    if (alibi) {
      cuda::rope_store_kv(ra, fb, kvv, stream);
      mark("rope + kv store");
      cuda::alibi_attention(aa, alibi_slopes.as<float>(), fb, kvv, stream);
      mark("alibi attention");
      return;
    }
    // In a step of decode tokens only, the decode attention kernel rotates and stores them
    // itself (bitwise the same; one launch less per layer). Not with verification rows, whose
    // queries read the keys of the tokens before them in the same step, nor with KV-Compress
    // (the kernel would rotate by slot, and a compressing step scores the rotated queries).
    if (tile_count == 0 && !has_verify && !has_tree && !has_offsets && !compressing && fused_rope &&
        W.qkv_bias.get() == nullptr) {
      aa.rope_inv_freq = ra.inv_freq;
      aa.rope_factor = ra.attention_factor;
    } else {
      cuda::rope_store_kv(ra, fb, kvv, stream);
      mark("rope + kv store");
    }
    cuda::decode_attention(aa, fb, kvv, dev + L.decode_queries, decode_count, decode_context,
                           split_workspace.as<float>(), stream);
    mark("decode attention");
    cuda::prefill_attention(aa, fb, kvv, reinterpret_cast<const cuda::PrefillTile*>(dev + L.tiles),
                            tile_count, stream);
    mark("prefill attention");
    if (compressing) {  // as the CPU: after the layer's attention read the whole cache
      kv_compress.compress_layer(qkv_out.as<float>(), static_cast<std::size_t>(qkv_width), aa.scale,
                                 fb, kvv, stream);
      mark("kv compress");
    }
  };

  // One layer's MLP from the 16-bit rows `in`, into `delta` (its down bias not yet added).
  auto mlp_block = [&](std::size_t l, const Layer& W, const void* in) {
    // Without a bias, gate and up are written as 16 bits (what the activation reads them
    // as in transformers too): half the bytes of fp32 through the product and the
    // activation. With a bias, or on the small-step kernel or the row kernel (16-bit weights),
    // fp32 as before.
    if (W.up_bias.get() == nullptr && !blas->small_step(T) && !uses_quant(W.up_q) &&
        !(row_kernel && W.up.get() != nullptr)) {
      blas_ok &= blas->linear16(in, T, dense16(W.up, W.up_q, mlp_width, H), mlp_width, H, mlp.get(),
                                mlp_width, P, stream);
      mark("gate_up product");
      prefetch(kDown, W.down, static_cast<std::size_t>(H) * I);
      cuda::mlp_activation16(kernel_activation(spec.activation), spec.gated_mlp, mlp.get(), nullptr,
                             T, I, act.get(), P, stream);
    } else if (const cuda::QuantMatrixView up_view{
                   W.up_q.get(), quant_format.value_or(cuda::QuantGemvFormat{}), mlp_width, H};
               spec.gated_mlp && W.up_bias.get() == nullptr && uses_quant(W.up_q) &&
               T <= cuda::kQuantGemvMaxTokens && cuda::quant_gemv_gated_supported(in, T, up_view)) {
      // Quantized decode: the gate_up product applies the activation itself
      // (quant_gemv_gated; WEFT_QUANT_GATED=0 turns it off).
      cuda::quant_gemv_gated(kernel_activation(spec.activation), in, T, up_view, act.get(), P,
                             stream);
      mark("gate_up product");
      prefetch_matrix(kDown, W.down, W.down_q, H, I);
    } else {
      blas_ok &= product(in, T, W.up, W.up_q, mlp_width, H, mlp.as<float>(), mlp_width);
      mark("gate_up product");
      prefetch_matrix(kDown, W.down, W.down_q, H, I);
      cuda::mlp_activation(kernel_activation(spec.activation), spec.gated_mlp, mlp.as<float>(),
                           or_null(W.up_bias), T, I, act.get(), P, stream);
    }
    mark("activation");
    const bool down16 = row_parallel_product(act.get(), W.down, W.down_q, I);
    mark("down product");
    if (early_next_prefetch) prefetch_next(l, true);  // beside the all-reduce
    if (!fused) {
      all_reduce_delta(down16);
    } else if (l + 1 < layers.size()) {  // and the next layer's first norm
      fused_reduce(or_null(W.down_bias), &layers[l + 1].attn_norm, &layers[l + 1].attn_norm_bias);
    } else {  // the sum into `delta`, for the final norm
      fused_reduce(nullptr, nullptr, nullptr);
    }
  };

  // Every kernel of the step, in order, on `stream`.
  auto enqueue = [&] {
    mark("start");
    if (!embeds) {
      // A later pipeline stage starts from the residual stream the stage before produced;
      // post-norm layers read it as 16 bits too.
      if (stage_in_device != nullptr) {
        cudaMemcpyAsync(x.get(), stage_in_device, static_cast<std::size_t>(T) * H * 4,
                        cudaMemcpyDeviceToDevice, stream);
      } else {
        cudaMemcpyAsync(x.get(), stage_in, static_cast<std::size_t>(T) * H * 4,
                        cudaMemcpyHostToDevice, stream);
      }
      if (post_norm) cuda::rows_to_precision(x.as<float>(), nullptr, T, H, h.get(), P, stream);
    } else {
      cuda::embedding_gather(embedding.get(), P, dev + L.tokens, T, H, x.as<float>(), stream);
      if (spec.embedding_scale != 1.0 || position_table.get() != nullptr) {
        cuda::scale_add_positions(x.as<float>(), T, H, static_cast<float>(spec.embedding_scale),
                                  position_table.get(), P, dev + L.positions, spec.position_offset,
                                  stream);
      }
      if (embedding_norm.get() != nullptr || post_norm) {
        // Bloom's embedding norm; post-norm layers read the residual itself as 16 bits.
        if (embedding_norm.get() != nullptr) {
          cuda::ResidualNormArgs en;
          en.residual = x.as<float>();
          en.rows = T;
          en.n = H;
          en.kind = norm_kind;
          en.weight = embedding_norm.as<float>();
          en.bias = or_null(embedding_norm_bias);
          en.eps = eps;
          en.out = post_norm ? h.get() : nullptr;
          en.precision = P;
          cuda::residual_norm(en, stream);
        } else {
          cuda::rows_to_precision(x.as<float>(), nullptr, T, H, h.get(), P, stream);
        }
      }
    }
    mark("embedding");
    if (!layers.empty())
      prefetch_matrix(kQkvOrHead, layers[0].qkv, layers[0].qkv_q,
                      static_cast<std::size_t>(qkv_width), H);
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const Layer& W = layers[l];
      cuda::AddNormArgs an;
      an.residual = x.as<float>();
      if (l > 0 && deferred_residual) {
        an.delta = delta.as<float>();
        an.delta_bias = or_null(layers[l - 1].down_bias);
      }
      an.rows = T;
      an.n = H;
      an.kind = norm_kind;
      an.weight = W.attn_norm.as<float>();
      an.bias = or_null(W.attn_norm_bias);
      an.eps = eps;
      an.out = h.get();
      an.precision = P;
      if (!post_norm && !(fused && l > 0)) {  // fused: done by the last layer's down
        cuda::add_norm(an, stream);
        mark("norm");
      }
      const bool own_mlp_norm = spec.parallel_attention && W.mlp_norm.get() != nullptr;
      if (own_mlp_norm) {
        cuda::AddNormArgs mn = an;
        mn.weight = W.mlp_norm.as<float>();
        mn.bias = or_null(W.mlp_norm_bias);
        mn.out = h_mlp.get();
        cuda::add_norm(mn, stream);
        mark("norm");
      }
      blas_ok &= product(h.get(), T, W.qkv, W.qkv_q, qkv_width, H, qkv_out.as<float>(), qkv_width);
      mark("qkv product");
      prefetch_matrix(kO, W.o, W.o_q, H, QD);
      attend(l, W);
      const bool o16 = row_parallel_product(attn.get(), W.o, W.o_q, QD);
      mark("o product");
      prefetch_matrix(kGateUp, W.up, W.up_q, static_cast<std::size_t>(mlp_width), H, true);
      if (!fused) all_reduce_delta(o16);  // while the side stream prefetches gate_up
      cuda::ResidualNormArgs rn;
      rn.residual = x.as<float>();
      rn.delta = delta.as<float>();
      rn.rows = T;
      rn.n = H;
      rn.kind = norm_kind;
      rn.eps = eps;
      rn.out = h.get();
      rn.precision = P;
      if (fused) {
        fused_reduce(or_null(W.o_bias), &W.mlp_norm, &W.mlp_norm_bias);
        mlp_block(l, W, h.get());
      } else if (deferred_residual) {
        an.delta = delta.as<float>();
        an.delta_bias = or_null(W.o_bias);
        an.weight = W.mlp_norm.as<float>();
        an.bias = or_null(W.mlp_norm_bias);
        cuda::add_norm(an, stream);
        mark("norm");
        mlp_block(l, W, h.get());
      } else if (spec.parallel_attention) {
        // x + attn(n_a(x)) + mlp(n_m(x)): the MLP reads the norms taken before the add.
        cuda::add_residual(x.as<float>(), delta.as<float>(), or_null(W.o_bias), T, H, stream);
        mlp_block(l, W, own_mlp_norm ? h_mlp.get() : h.get());
        cuda::add_residual(x.as<float>(), delta.as<float>(), or_null(W.down_bias), T, H, stream);
        mark("residual");
      } else {  // post-norm: x = n_a(x + attn(x)); x = n_m(x + mlp(x))
        rn.delta_bias = or_null(W.o_bias);
        rn.weight = W.attn_norm.as<float>();
        rn.bias = or_null(W.attn_norm_bias);
        cuda::residual_norm(rn, stream);
        mark("norm");
        mlp_block(l, W, h.get());
        rn.delta_bias = or_null(W.down_bias);
        rn.weight = W.mlp_norm.as<float>();
        rn.bias = or_null(W.mlp_norm_bias);
        cuda::residual_norm(rn, stream);
        mark("norm");
      }
      if (!early_next_prefetch) prefetch_next(l, false);
    }
    if (!ends) {
      // A stage before the last hands on the whole residual stream, its deferred add done.
      if (deferred_residual && !layers.empty()) {
        cuda::add_residual(x.as<float>(), delta.as<float>(), or_null(layers.back().down_bias), T, H,
                           stream);
      }
      if (forked) {
        cudaEventRecord(join_event, side_stream);
        cudaStreamWaitEvent(stream, join_event, 0);
      }
      if (stage_out_device != nullptr) {
        cudaMemcpyAsync(stage_out_device, x.get(), static_cast<std::size_t>(T) * H * 4,
                        cudaMemcpyDeviceToDevice, stream);
      }
      return;
    }
    // The last residual add and the final norm, only for the rows that need logits; a
    // post-norm network has no final norm, its rows go to the head as they are.
    if (final_norm.get() == nullptr) {
      cuda::rows_to_precision(x.as<float>(), dev + L.logit_rows, rows, H, h.get(), P, stream);
    } else {
      cuda::AddNormArgs fin;
      fin.residual = x.as<float>();
      if (!layers.empty() && deferred_residual) {
        fin.delta = delta.as<float>();
        fin.delta_bias = or_null(layers.back().down_bias);
      }
      fin.row_index = dev + L.logit_rows;
      fin.rows = rows;
      fin.n = H;
      fin.kind = norm_kind;
      fin.weight = final_norm.as<float>();
      fin.bias = or_null(final_norm_bias);
      fin.eps = eps;
      fin.write_back = false;
      fin.out = h.get();
      fin.precision = P;
      cuda::add_norm(fin, stream);
    }
    mark("norm");
    if (vocab_split) {
      if (head_mine > 0) {
        blas_ok &= blas->linear(h.get(), rows, head_rows, head_mine, H, shard_out, Vs, P, stream);
      }
      mark("lm_head product");
      const auto shard_floats = static_cast<std::size_t>(rows) * Vs;
      if (tp_fence && head_in_window) cuda::stream_fence(stream);
      reduce_ok &= static_cast<bool>(
          tensor_parallel->all_gather(std::span<const float>(shard_out, shard_floats),
                                      std::span<float>(gathered, shard_floats * tp_ranks)));
      for (int k = 0; k < tp_ranks; ++k) {
        const int width = std::min(Vs, V - k * Vs);
        if (width <= 0) continue;
        blas_ok &=
            cudaMemcpy2DAsync(logits.as<float>() + static_cast<std::size_t>(k) * Vs,
                              static_cast<std::size_t>(V) * 4, gathered + shard_floats * k,
                              static_cast<std::size_t>(Vs) * 4, static_cast<std::size_t>(width) * 4,
                              rows, cudaMemcpyDeviceToDevice, stream) == cudaSuccess;
      }
      mark("lm_head all-gather");
    } else {
      blas_ok &= product(h.get(), rows, head, lm_head_q, V, H, logits.as<float>(), V, true);
      mark("lm_head product");
    }
    if (stage_out_device != nullptr) {
      cudaMemcpyAsync(stage_out_device, logits.as<float>(), static_cast<std::size_t>(rows) * V * 4,
                      cudaMemcpyDeviceToDevice, stream);
    }
    if (forked) {
      cudaEventRecord(join_event, side_stream);
      cudaStreamWaitEvent(stream, join_event, 0);
    }
  };
  // A pure decode step of a shape seen before replays its CUDA graph: one launch instead of
  // ~10 per layer. The graph's kernels read this step's metadata from the same buffer.
  const bool graph_step = options.cuda_graphs && !graphs_broken && tile_count == 0 && !has_tree &&
                          !compressing && !profiling && ((embeds && ends) || device_stage);
  if (graph_step) {
    const int splits = cuda::decode_split_count(decode_context);
    const GraphKey key{
        T, S, rows, splits, has_verify, has_offsets, stage_in_device, stage_out_device};
    auto it = graphs.find(key);
    if (it == graphs.end()) {
      if (graphs.size() >= kMaxGraphs) drop_graphs();
      cuda::prepare_attention_kernels();
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      bool captured =
          cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
      if (captured) {
        enqueue();
        captured = cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph != nullptr;
      }
      captured = captured && blas_ok && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
      if (graph != nullptr) cudaGraphDestroy(graph);
      if (!captured) {
        // Capture is an optimisation: fall back to plain launches from now on.
        cudaGetLastError();
        graphs_broken = true;
        blas_ok = true;
        enqueue();
      } else {
        it = graphs.emplace(key, exec).first;
      }
    }
    if (it != graphs.end()) {
      if (auto err = cudaGraphLaunch(it->second, stream); err != cudaSuccess) {
        return cuda_error(err, "launching the step's graph");
      }
    }
  } else {
    enqueue();
  }
  if (auto err = cudaGetLastError(); err != cudaSuccess)
    return cuda_error(err, "launching the step");
  if (!blas_ok) return Error(ErrorCode::kInternal, "CUDA: a cuBLAS product failed in the step");
  if (!reduce_ok) {
    return Error(ErrorCode::kInternal,
                 "CUDA: a tensor-parallel all-reduce (" + tensor_parallel->name() + ") failed");
  }
  if (!ends && !device_stage) {
    // The residual stream to the host, for the next stage.
    stage_out->resize(static_cast<std::size_t>(T) * H);
    if (auto err = cudaMemcpyAsync(stage_out->data(), x.get(), stage_out->size() * 4,
                                   cudaMemcpyDeviceToHost, stream);
        err != cudaSuccess) {
      return cuda_error(err, "copying the stage's hidden state to the host");
    }
    if (auto err = cudaStreamSynchronize(stream); err != cudaSuccess) {
      return cuda_error(err, "running the stage");
    }
    return {};
  }
  if (!copy_logits) {
    // Launched only; a profiled step waits here so its kernel times can be read.
    if (profiling) {
      if (auto err = cudaStreamSynchronize(stream); err != cudaSuccess) {
        return cuda_error(err, "running the step");
      }
      accumulate_profile();
    }
    return {};
  }
  // The logits, in up to kLogitChunks pieces: the host copies each out of pinned memory
  // (into logits_out, resized without a fill when its size is unchanged) while the next one
  // crosses the bus.
  const std::size_t count = static_cast<std::size_t>(rows) * V;
  if (copy_events.empty()) {
    copy_events.resize(kLogitChunks, nullptr);
    for (auto& e : copy_events) {
      if (auto err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming); err != cudaSuccess) {
        return cuda_error(err, "creating the logits copy events");
      }
    }
  }
  const std::size_t chunks =
      std::clamp<std::size_t>((count + kLogitChunkFloats - 1) / kLogitChunkFloats, 1, kLogitChunks);
  const std::size_t per_chunk = (count + chunks - 1) / chunks;
  const float* host = logits_host.as<float>();
  for (std::size_t k = 0; k < chunks; ++k) {
    const std::size_t begin = std::min(count, k * per_chunk);
    const std::size_t n = std::min(per_chunk, count - begin);
    if (auto err = cudaMemcpyAsync(logits_host.as<float>() + begin, logits.as<float>() + begin,
                                   n * 4, cudaMemcpyDeviceToHost, stream);
        err != cudaSuccess) {
      return cuda_error(err, "copying logits to the host");
    }
    if (auto err = cudaEventRecord(copy_events[k], stream); err != cudaSuccess) {
      return cuda_error(err, "copying logits to the host");
    }
  }
  logits_out.resize(count);
  for (std::size_t k = 0; k < chunks; ++k) {
    const std::size_t begin = std::min(count, k * per_chunk);
    const std::size_t n = std::min(per_chunk, count - begin);
    if (auto err = cudaEventSynchronize(copy_events[k]); err != cudaSuccess) {
      return cuda_error(err, "running the step");
    }
    std::memcpy(logits_out.data() + begin, host + begin, n * 4);
  }
  if (auto err = cudaStreamSynchronize(stream); err != cudaSuccess) {
    return cuda_error(err, "running the step");
  }
  if (profiling) accumulate_profile();
  return {};
}

}  // namespace weft::model
