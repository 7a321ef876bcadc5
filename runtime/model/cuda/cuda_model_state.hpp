#pragma once
// CudaModel's state, shared by its source files: cuda_model.cpp, cuda_model_prepare.cpp and
// cuda_model_enqueue.cpp (the forward pass), cuda_model_load.cpp (creation and weight upload),
// cuda_sampling.cpp (the GPU sampler's host side) and the rest of cuda_model_*.cpp. Internal:
// included by those files only.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cuda/activation.hpp"
#include "kernels/cuda/convert.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/paged_kv.hpp"
#include "kernels/cuda/quant_gemv.hpp"
#include "kernels/cuda/quant_layout.hpp"
#include "kernels/cuda/tp_fused.hpp"
#include "runtime/model/cuda/cuda_common.hpp"
#include "runtime/model/cuda/cuda_kv_compress.hpp"
#include "runtime/model/cuda/cuda_model.hpp"
#include "runtime/model/cuda/device_buffer.hpp"
#include "runtime/model/rope_frequencies.hpp"

namespace weft::model {

using cuda_detail::cuda_error;
using cuda_detail::DeviceBuffer;
using cuda_detail::kernel_activation;
using cuda_detail::PinnedBuffer;
using cuda_detail::source_type;

namespace cuda_model_detail {

// Word offsets of the step's metadata in the one buffer uploaded per step.
struct StepLayout {
  // slots: each token's KV slot (its position less its sequence's KV-Compress slot offset),
  // the positions the attention kernels see.
  std::size_t tokens = 0, positions = 0, slots = 0, token_seq = 0, table_begin = 0, page_ids = 0;
  std::size_t logit_rows = 0, decode_queries = 0, tiles = 0, inv_freq = 0, factor = 0;
  // Decode rows (single tokens and verification rows) of the step and of its logit rows, for
  // the row kernel (gemv_rows) in steps that also hold prefill chunks; token trees' paths.
  std::size_t row_list = 0, head_rows = 0, tree_from = 0, tree_begin = 0, tree_slots = 0;
  std::size_t words = 0;
};

// One step between State::run's phases: its shape and metadata layout as prepare_step uploaded
// them, the views the kernels read them through, and whether enqueue_step's products and
// all-reduces were accepted (run() reports them after the launch).
struct PreparedStep {
  int T = 0, rows = 0;  // tokens, logit rows
  int R = 0;            // rotary dims (0: no rope)
  // Decode queries and prefill tiles, the longest decode context, and the decode rows among the
  // logit rows (for the row kernel).
  int decode_count = 0, tile_count = 0, decode_context = 0, head_decode_rows = 0;
  bool fused_rope = false;  // decode-only steps may leave rope and the KV store to attention
  bool has_tree = false, has_verify = false, has_offsets = false, compressing = false;
  bool head_in_window = false;  // the vocab-parallel head gathers in collective memory
  StepLayout L;
  cuda::FlatBatchView fb;
  cuda::PagedKvView kvv;
  std::size_t element_bytes = 0;  // of a KV page element
  bool blas_ok = true, reduce_ok = true;
};

// Quantized weights (docs/quantization.md): steps of up to this many tokens read them through
// cuda::quant_gemv, 8 tokens per pass (reading the weights once per 8 tokens costs less than
// dequantizing them, by the count of bytes moved, to about 24 tokens); larger ones dequantize
// the matrix (in row chunks that fit the scratch buffer) and multiply the 16-bit rows through
// cuBLAS (CudaModel::State::step_product).
inline constexpr int kQuantChunkedTokens = 3 * cuda::kQuantGemvMaxTokens;  // 24

// CudaModelOptions::row_kernel_tokens, or WEFT_ROW_KERNEL_TOKENS where set; at most
// cuda::kGemvRowsMax (cuda_model.cpp).
int row_kernel_limit(const CudaModelOptions& options);

}  // namespace cuda_model_detail

using namespace cuda_model_detail;

struct CudaModel::State {
  ModelSpec spec;
  CudaModelOptions options;
  KvLayout layout;  // the held layers' (options.layers) keys and values
  // Pipeline stage (options.layers): the first held layer, whether the stage embeds and ends;
  // while a stage step runs, its host input (null: embed) and output (null: logits).
  int first_layer = 0;
  bool embeds = true, ends = true;
  const float* stage_in = nullptr;
  std::vector<float>* stage_out = nullptr;
  // A stage step of enqueue_layers: its input (null: embed) and output (null: none) in device
  // memory, copied on `stream`; the step runs without a host wait and may replay a graph.
  bool device_stage = false;
  const float* stage_in_device = nullptr;
  float* stage_out_device = nullptr;
  int num_pages = 0;
  std::vector<int> free;  // a stack, as KvCache's
  cudaStream_t stream = nullptr;
  // Decode steps' L2 prefetches of upcoming weights run here, forked from and joined back
  // into `stream` by the events (run()).
  cudaStream_t side_stream = nullptr;
  cudaEvent_t fork_event = nullptr, join_event = nullptr;
  // The sampler's input (rows, edits, the bitmasks of constrained rows: 16 KB a row on a 128K
  // vocabulary) is copied here while the step's forward pass still runs on `stream`, which
  // waits for upload_event only before the sampling kernel (cuda_sampling.cpp).
  cudaStream_t upload_stream = nullptr;
  cudaEvent_t upload_event = nullptr;
  std::unique_ptr<cuda::Blas> blas;
  CudaKvCompress kv_compress;  // the scratch of steps that compress (cuda_kv_compress.hpp)
  std::size_t weight_bytes = 0;

  struct Layer {
    DeviceBuffer attn_norm, attn_norm_bias, mlp_norm, mlp_norm_bias;
    DeviceBuffer qkv, qkv_bias, o, o_bias, up, up_bias, down, down_bias;  // up: gate_up if gated
    // Quantized weights (docs/quantization.md): the same fused matrices in the GPU layout of
    // cuda/quant_layout.hpp, instead of the 16-bit ones above (then null). Steps of few tokens
    // read them through cuda::quant_gemv; larger ones dequantize one matrix at a time into
    // `dequant_scratch` and multiply through cuBLAS.
    DeviceBuffer qkv_q, o_q, up_q, down_q;
  };
  DeviceBuffer embedding, lm_head, final_norm, final_norm_bias;
  // Zoo blocks (docs/model-spec.md): learned positions ([rows, hidden], 16-bit), the norm after
  // the embedding, ALiBi slopes; null when the spec has none.
  DeviceBuffer position_table, embedding_norm, embedding_norm_bias, alibi_slopes;
  DeviceBuffer lm_head_q;  // an untied, quantized lm head's blocks
  // The format of the *_q buffers, when the model's weights are quantized and every quantized
  // matrix has a GPU layout (in_features a multiple of 64; else they upload as 16-bit copies).
  std::optional<cuda::QuantGemvFormat> quant_format;
  // The 16-bit matrix a large step's product dequantizes into: the largest layer matrix (an
  // lm head larger than that goes through it in row chunks).
  DeviceBuffer dequant_scratch;
  // Steps of 3-8 tokens through the dp4a product: each product's x rounded once
  // (cuda::quant_round_inputs; rounded_dp4a).
  DeviceBuffer rounded_inputs;
  std::vector<Layer> layers;
  DeviceBuffer kv;  // the page pool

  // Rope inverse frequencies for every scaling but dynamic NTK (which depends on the length).
  std::optional<RopeFrequencies> fixed_rope;

  // Step buffers.
  int capacity_tokens = 0;
  DeviceBuffer x, h, qkv_out, attn, delta, mlp, act, logits, split_workspace, meta;
  DeviceBuffer h_mlp;  // parallel attention with its own MLP norm: the MLP's 16-bit input
  // The sums of squares a dp4a product hands the next one when the step's norms run inside
  // the products (norm_fusable; cuda::QuantNormArgs): 2 tokens x quant_norm_squares(hidden).
  DeviceBuffer norm_squares;
  PinnedBuffer meta_host, logits_host;
  // The GPU sampler's buffers: its inputs (rows, edits, bitmasks) and outputs (results,
  // candidates, top entries) each travel in one copy; `work` holds the rows being sampled.
  DeviceBuffer sample_in, sample_out, sample_work;
  PinnedBuffer sample_in_host, sample_out_host;
  std::uint64_t last_prepare_ns = 0;  // the last run()'s reserve_step and prepare_step
  int launched_rows = -1;             // logit rows of the step launch() enqueued; -1: none
  // Greedy chains (cuda_draft_chain.cpp): when set, run() copies T token ids from here (one
  // every feed_pitch bytes, device memory) over the step's uploaded tokens, after the upload.
  const void* feed_tokens = nullptr;
  std::size_t feed_pitch = 0;
  // Recorded after each step's metadata upload from meta_host: a step enqueued while the one
  // before has not finished (a chain) waits for it before writing meta_host again.
  cudaEvent_t meta_event = nullptr;
  bool meta_pending = false;
  PinnedBuffer chain_host;  // a chain's ids, steps x slices
  // A tensor-parallel group (set_tensor_parallel): o's and down's outputs are all-reduced.
  parallel::Communicator* tensor_parallel = nullptr;
  // Vocab-parallel head (set_tensor_parallel, WEFT_TP_VOCAB_PARALLEL): each rank multiplies its
  // slice of the head's rows into head_shard (rows x ceil(V / ranks)); an all-gather fills
  // head_gathered (every rank's shard, rank after rank), copied into `logits` row by row.
  bool vocab_parallel = false;
  DeviceBuffer head_shard, head_gathered;
  // bf16 all-reduce of o's and down's outputs for steps of at least this many tokens (0: off;
  // set_tensor_parallel, WEFT_TP_BF16_REDUCE_TOKENS): the products write bf16 rows into delta16
  // (capacity_tokens x hidden), summed there and widened into `delta`.
  int bf16_reduce_tokens = 0;
  DeviceBuffer delta16;
  // The group's collective memory (set_tensor_parallel, WEFT_TP_NCCL_BUFFERS): `delta` and
  // `delta16` adopt it (a later reserve_step beyond it gives them plain memory again), and the
  // head's all-gather uses head_window_* for steps of up to head_window_rows logit rows. With
  // tp_fence, a cuda::stream_fence goes before each collective on it (CollectiveMemory).
  std::string tp_buffers = "plain device memory";
  bool tp_fence = false;
  // cuda::AttentionArgs::segment_keys of every decode attention (options.decode_segment_keys
  // resolved: create, then set_tensor_parallel for -1).
  int decode_segment_keys = 0;
  float* head_window_shard = nullptr;
  float* head_window_gathered = nullptr;
  int head_window_rows = 0;
  // The fused all-reduce, residual add and norm (set_tensor_parallel, WEFT_TP_FUSED_NORM;
  // kernels/cuda/tp_fused.hpp): steps of up to tp_fused_rows tokens on pre-norm sequential
  // layers write o's and down's partial rows into the window's two slots in turn (o into 0,
  // down into 1: a rank rewrites a slot only after every rank has passed the barrier of the
  // launch after the one that read it), and one kernel sums them over the ranks and does the
  // add_norm that follows. 0 rows: off.
  cuda::TpFusedGroup tp_fused;
  int tp_fused_rows = 0;
  std::size_t tp_fused_slot_bytes = 0;
  float* tp_fused_base = nullptr;     // this rank's window: slot k at k * tp_fused_slot_bytes
  std::string tp_fused_note = "off";  // for tensor_parallel_buffers(): on, or why not
  // Where o's and down's products of steps through the LL exchange push their rows
  // themselves (cuda::tp_fused_push; WEFT_TP_FUSED_PUSH=0 leaves the pushes to the fused
  // kernel). Empty when off.
  cuda::LlPush tp_push;

  // Decode graphs by (tokens, sequences, logit rows, decode splits, whether verification rows
  // are in it, whether a sequence has a KV-Compress slot offset, and a device stage's input
  // and output): what fixes their grids, kernels, metadata offsets and copies. They point into
  // the buffers above, so any reallocation drops them.
  using GraphKey = std::tuple<int, int, int, int, bool, bool, const void*, const void*>;
  static constexpr std::size_t kMaxGraphs = 512;
  std::map<GraphKey, cudaGraphExec_t> graphs;
  bool graphs_broken = false;

  // The logits come back in chunks, each followed by an event: the host copies chunk k out of
  // pinned memory while chunk k + 1 crosses the bus.
  static constexpr std::size_t kLogitChunks = 8;
  static constexpr std::size_t kLogitChunkFloats = std::size_t{1} << 20;
  std::vector<cudaEvent_t> copy_events;

  // Per-kernel-class timing (set_kernel_profiling): an event after each kernel class of a
  // plain (uncaptured) step, and the milliseconds summed by class.
  bool profiling = false;
  std::vector<std::pair<const char*, cudaEvent_t>> marks;
  std::size_t marks_used = 0;
  std::map<std::string, double> profile_ms;
  void accumulate_profile() {
    for (std::size_t i = 1; i < marks_used; ++i) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, marks[i - 1].second, marks[i].second) == cudaSuccess) {
        profile_ms[marks[i].first] += ms;
      }
    }
  }
  void drop_graphs() {
    for (auto& [key, exec] : graphs)
      cudaGraphExecDestroy(exec);
    graphs.clear();
  }

  ~State() {
    if (stream != nullptr) {
      cudaSetDevice(options.device);
      cudaStreamSynchronize(stream);
      drop_graphs();
      for (auto e : copy_events)
        cudaEventDestroy(e);
      for (auto& m : marks)
        cudaEventDestroy(m.second);
      for (auto e : upload_done)
        if (e != nullptr) cudaEventDestroy(e);
      if (side_stream != nullptr) cudaStreamDestroy(side_stream);
      if (upload_stream != nullptr) cudaStreamDestroy(upload_stream);
      if (upload_event != nullptr) cudaEventDestroy(upload_event);
      if (meta_event != nullptr) cudaEventDestroy(meta_event);
      if (fork_event != nullptr) cudaEventDestroy(fork_event);
      if (join_event != nullptr) cudaEventDestroy(join_event);
      cudaStreamDestroy(stream);
    }
  }

  Result<void> reserve_step(int tokens);
  // The fused all-reduce and norm (cuda_model_tp_fused.cpp): join_fused_norm sets tp_fused*
  // up when WEFT_TP_FUSED_NORM asks (collective; off with the reason in tp_fused_note when the
  // group or the library cannot), check_fused_norm tests it against NCCL's all-reduce and
  // add_norm first and returns why it failed, if it did.
  // fused_norm_switches reads WEFT_TP_FUSED_NORM and WEFT_TP_FUSED_ROWS and checks that every
  // rank of the group has the same (collective), before set_tensor_parallel changes anything.
  struct FusedNormSwitches {
    bool fused = false;
    // Steps of up to this many tokens take the fused kernel. Unset (WEFT_TP_FUSED_ROWS): 256
    // for two ranks, 64 for more (four H200s: at 256 rows the one-shot gather of three
    // peers' rows lost to NCCL's all-reduce; docs/parallel.md).
    int rows = 0;
    // Steps of up to this many tokens exchange their partial rows by the LL protocol instead
    // of meeting at a barrier (TpFusedGroup::ll_rows; WEFT_TP_FUSED_LL_ROWS, 0 turns it off).
    int ll_rows = 0;
    // The products before the LL exchange push their rows themselves (ll_push.hpp;
    // WEFT_TP_FUSED_PUSH, default on).
    bool push = true;
  };
  Result<FusedNormSwitches> fused_norm_switches(parallel::Communicator& comm);
  Result<void> join_fused_norm(parallel::Communicator& comm, const FusedNormSwitches& switches);
  std::string check_fused_norm(parallel::Communicator& comm);
  Result<void> upload_matrix(const cpu::WeightMatrix& w, DeviceBuffer& dst, std::size_t row_offset,
                             std::size_t total_rows, DeviceBuffer& staging);
  // Weight uploads go through two pinned chunks: the host copies chunk k + 1 out of the
  // mapped file while chunk k crosses the bus (a pageable source would be staged by the
  // driver in small synchronous pieces).
  static constexpr std::size_t kUploadChunk = std::size_t{32} << 20;
  PinnedBuffer upload_chunks[2];
  cudaEvent_t upload_done[2] = {nullptr, nullptr};
  std::size_t uploaded = 0, upload_total = 0;
  Result<void> upload_floats(const std::vector<float>& v, DeviceBuffer& dst);
  // Repacks a quantized w's block rows into rows [row_offset, row_offset + w.rows) of a
  // [total_rows, w.cols] device matrix in the GPU layout (cuda/quant_layout.hpp); nothing when
  // w is not quantized or the model has no GPU layout (quant_format empty).
  Result<void> upload_quantized(const cpu::WeightMatrix& w, DeviceBuffer& dst,
                                std::size_t row_offset, std::size_t total_rows);
  // copy_logits false: enqueue the step and return without waiting (launch()).
  Result<void> run(const StepBatch& batch, std::vector<float>& logits, bool copy_logits = true);
  // run()'s phases: prepare_step lays the step's metadata out, uploads it and sizes the step's
  // buffers (cuda_model_prepare.cpp); enqueue_step enqueues every kernel of the step on
  // `stream`, plainly or into the graph run() captures (cuda_model_enqueue.cpp).
  Result<void> prepare_step(const StepBatch& batch, bool copy_logits, PreparedStep& step);
  void enqueue_step(PreparedStep& step);
  // One of the step's products, y[tokens, out] (leading dimension ldy) = x[tokens, in] * w^T
  // (cuda_model_product.cpp): the quantized matrix wq where the model has one (quant_gemv up to
  // kQuantChunkedTokens tokens, else dequantized row chunks through cuBLAS), else the 16-bit w16
  // through cuBLAS and, for the step's decode rows (`head`: its logit rows), the row kernel.
  // False where cuBLAS failed.
  // Whether a product of `tokens` tokens goes through the dp4a product on x rounded once
  // (cuda::quant_gemv_dp4a_rounded): 5-8 tokens, q4 formats, the quantized kernel left to auto
  // (WEFT_QUANT_GEMV), WEFT_QUANT_DP4A_ROUNDED not 0.
  bool rounded_dp4a(int tokens) const;
  bool step_product(const PreparedStep& step, const void* x, int tokens, const DeviceBuffer& w16,
                    const DeviceBuffer& wq, int out_features, int in_features, float* y, int ldy,
                    bool head = false);
  // Whether a step of T tokens runs its residual adds and norms inside its layer products
  // (cuda::QuantNormArgs; cuda_model_norm_fused.cpp): one GPU, pre-norm RMS layers with a gated
  // MLP and no biases on the norms, o or down, every layer matrix quantized and read through
  // the dp4a kernel at T tokens; WEFT_QUANT_NORM_FUSED=0 turns it off.
  bool norm_fusable(int T) const;
  // Their arguments: a consumer's (qkv, gate_up), a producer's (o, down) whose rows go into `x`
  // and, times `weight` (the next norm's), into `h`.
  cuda::QuantNormArgs norm_in_args() const;
  cuda::QuantNormArgs norm_out_args(const DeviceBuffer& weight);
  Result<void> sample(const DeviceSamplingInput& input, DeviceSamplingOutput& output);
  Result<void> greedy_chain(const StepBatch& first, int steps, std::vector<std::int32_t>& tokens);
};

}  // namespace weft::model
