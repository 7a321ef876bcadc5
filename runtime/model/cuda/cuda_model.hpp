#pragma once
// A decoder-only transformer on one GPU: the weights of a (CPU-bound, already checked) Model
// uploaded in bf16 or fp16, a device KV pool of pages in the CPU KvCache's layout, and a
// forward pass over a StepBatch that returns fp32 logits on the host, or keeps them there for
// the GPU sampler. Within a step the host waits on the device once, for the logits or for the
// sampled tokens.

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/cuda/precision.hpp"
#include "runtime/model/forward_backend.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/step_batch.hpp"
#include "weft/error.hpp"

namespace weft::model {

struct CudaModelOptions {
  int device = 0;
  cuda::Precision precision = cuda::Precision::kBF16;
  int page_size = 16;
  // The KV pages' element type: kBF16 or kF16 store K and V in `precision` (either spelling),
  // kInt8 and kFp8E4M3 one byte per element with a scale per (token, kv head) row
  // (kernels/kv_dtype.hpp), about half the bytes; kF32 is refused.
  KvDtype kv_dtype = KvDtype::kBF16;
  // KV pages in the pool; 0: as many as fit in gpu_memory_fraction of the device's total
  // memory once the weights and step buffers (and whatever else the process holds) are in.
  int num_pages = 0;
  double gpu_memory_fraction = 0.9;
  // Step buffers are sized for this many tokens at creation; a larger step grows them (one
  // reallocation, which waits for the device).
  int max_tokens_per_step = 512;
  // Replay decode-only steps as CUDA graphs, one per (batch size, decode split count).
  bool cuda_graphs = true;
  // Products of steps with up to this many tokens (0-8) use a streaming kernel instead of
  // cuBLAS (kernels/cuda/gemv.hpp): 1 makes batch-1 decode 6-7% faster on an H100. Its sums
  // are in another order than cuBLAS's, so a token's logits (and, at near ties, its greedy
  // choice) would depend on the size of the step it runs in. -1 (the default): 0 on one GPU,
  // whose decode rows keep their bits in any batch; 1 once set_tensor_parallel joins a group
  // of two or more, whose large steps all-reduce in bf16 and so do not keep them anyway
  // (batch-1 steps of the 8B shape 12% shorter at TP=2 on H200s, docs/parallel.md).
  int small_step_kernel_tokens = -1;
  // The streaming decode attention's segment (cuda::AttentionArgs::segment_keys): a multiple
  // of 64 from 64 to 4096, or 0 for the process's (WEFT_DECODE_STREAM_SEGMENT_KEYS, 256 when
  // unset). It sets the kernel's rounding, so it is one value for the model's life. -1 (the
  // default): 0, and 128 once set_tensor_parallel joins a group of two or more (unless
  // WEFT_DECODE_STREAM_SEGMENT_KEYS is set): a rank holds few kv heads, and at one token the
  // smaller segment spreads their keys over twice the blocks (8B batch-1 steps 2-4% shorter at
  // TP=2, 0.5-1.7% longer at batches 16-256; docs/parallel.md, "One-token steps").
  int decode_segment_keys = -1;
  // A step's decode rows (single-token slices and speculative verification rows), when it has
  // 1 to this many (at most cuda::kGemvRowsMax, 32), go through the row kernel
  // (kernels/cuda/gemv_rows.hpp) for every 16-bit product instead of cuBLAS: a row's bits then
  // do not depend on how many rows share its step, so a verified draft token gets exactly the
  // logits plain decoding gives it, and verifying a few rows reads the weights once. In a step
  // that also holds prefill chunks, cuBLAS computes every row and the row kernel recomputes
  // the decode rows (one more pass over the weights). 0: cuBLAS for every product (then
  // speculative greedy output may differ from plain greedy output in the last bits).
  // WEFT_ROW_KERNEL_TOKENS overrides it, for comparisons. Off by default: measured on an H100
  // (docs/PERFORMANCE.md, 2026-11-25), 16 made plain batch-1 decode of the 8B shape 17% slower
  // (7.26 against 6.21 ms a step) and broke the engine's batch invariance
  // (CudaEngine.SeededRequestIsReproducibleAndGreedyIsBatchInvariant); 16 turns exact
  // verification on.
  int row_kernel_tokens = 0;
  // Called while the weights upload, after each matrix, with the bytes of the stored
  // (mmapped) weights copied so far and in all.
  std::function<void(std::size_t done, std::size_t total)> on_upload_progress;
  // Hold and run only these layers of the model (a pipeline stage, docs/parallel.md; count -1:
  // all). The pool then holds only their keys and values, the embedding is uploaded only for a
  // stage that starts at layer 0 (or ends with a tied lm head), the final norm and lm head only
  // for one that ends at the last layer. A partial model runs through forward_layers().
  LayerRange layers;
};

class CudaModel final : public ForwardBackend {
 public:
  // Uploads the model's weights (converted to options.precision). Errors: no such device,
  // out of device memory, a shape the kernels do not support (head_dim above 256 or odd).
  static Result<CudaModel> create(const Model& model, const CudaModelOptions& options);

  CudaModel(CudaModel&&) noexcept;
  CudaModel& operator=(CudaModel&&) noexcept;
  ~CudaModel() override;

  const ModelSpec& spec() const noexcept override;
  cuda::Precision precision() const noexcept;
  int device() const noexcept;
  // Device bytes the weights take.
  std::size_t weight_bytes() const noexcept;

  // The KV pool: same page accounting as KvCache (exact free count, most recently freed first).
  const KvLayout& kv_layout() const noexcept;
  int num_pages() const noexcept override;
  int free_pages() const noexcept;
  int pages_for(int tokens) const noexcept;
  std::optional<int> allocate_page();
  void release_page(int page);

  // Kernel timing, for benchmarks: while on, steps run as plain launches (no graphs) with a
  // device event after each kernel class (the events add a little time of their own), and
  // take_kernel_profile() returns the milliseconds by class ("qkv product", "decode
  // attention", ...) summed over the steps since its last call, which resets them.
  void set_kernel_profiling(bool on) noexcept;
  std::map<std::string, double> take_kernel_profile();

  // One step: writes the new tokens' keys and values into their pages and fills `logits`
  // with batch.logit_rows() rows of vocab_size floats, like Model::forward. Invalid input is
  // an error (the same checks as the CPU model); a CUDA failure is a kInternal error.
  Result<void> forward(const StepBatch& batch, std::vector<float>& logits) override;

  // The layers this model holds (CudaModelOptions::layers), and one pipeline stage's part of
  // a step, as Model::forward_layers: from the token embedding (first stage, hidden_in empty)
  // or from hidden_in (host, [tokens x hidden_size] fp32), to the logits (last stage) or the
  // residual stream after the stage's last layer (host fp32). Steps run as plain launches
  // (no CUDA graphs) unless the model holds every layer.
  LayerRange layers() const noexcept;
  Result<void> forward_layers(const StepBatch& batch, std::span<const float> hidden_in,
                              std::vector<float>& out);
  // forward_layers with the residual stream in device memory (a GPU pipeline over NCCL,
  // runtime/parallel/nccl_pipeline.hpp; cuda_model_parallel.cpp): `hidden_in` (null when the
  // stage embeds, else [tokens x hidden_size] fp32 on this GPU) is copied in on cuda_stream(),
  // and the stage's output, the residual stream after its last layer or (when it ends) the
  // logits (logit_rows x vocab_size), is copied to `out` (device memory; null only for a last
  // stage whose logits nobody reads). Enqueued without waiting for the device; decode steps
  // replay CUDA graphs (keyed by the two pointers too, so reuse a few fixed buffers).
  Result<void> enqueue_layers(const StepBatch& batch, const float* hidden_in, float* out);
  // A step's logits computed elsewhere (a GPU pipeline's last stage, for the sampler on world
  // rank 0): `rows` rows of vocab_size floats in this GPU's memory or the host's, copied into
  // this model's logits on cuda_stream() (the caller orders that stream after their arrival),
  // so that sample() samples them as after launch().
  Result<void> adopt_logits(const float* logits, int rows);

  // Sampling on the GPU (kernels/cuda/sampling.hpp): launch() enqueues a step and returns
  // without waiting; sample() samples the rows of its logits and waits once, for the
  // results. Only the candidates and a few numbers per row cross the bus, not the logits.
  bool samples_on_device() const noexcept override { return true; }
  // Token trees run through the decode attention kernel, each node a query over the context
  // and its path (kernels/cuda/tree_slots.cuh); not on ALiBi models.
  bool supports_token_trees() const noexcept override;
  // The row kernel's limit (row_kernel_tokens, or WEFT_ROW_KERNEL_TOKENS); 0 when it is off,
  // then nothing bounds the exactness of cuBLAS rows anyway.
  int exact_verify_rows() const noexcept override;
  Result<void> launch(const StepBatch& batch) override;
  Result<void> sample(const DeviceSamplingInput& input, DeviceSamplingOutput& output) override;
  // The last step's reserve_step and prepare_step (its metadata built and uploaded).
  std::uint64_t last_prepare_ns() const noexcept override;
  // A draft model's greedy chain (ForwardBackend::greedy_chain; cuda_draft_chain.cpp): every
  // step is enqueued without waiting (decode steps replay their CUDA graphs), the argmaxes are
  // picked by the sampling kernel and copied into the next step's tokens on the device, and
  // one copy of steps x slices ids comes back after the one wait.
  bool runs_greedy_chains() const noexcept override;
  Result<void> greedy_chain(const StepBatch& first, int steps,
                            std::vector<std::int32_t>& tokens) override;

  // Tensor parallelism (docs/parallel.md; cuda_model_parallel.cpp). The stream every step
  // runs on (a cudaStream_t): a group's NCCL communicator is made on it, so its collectives
  // sit between the step's kernels and inside its CUDA graphs.
  void* cuda_stream() const noexcept;
  // This model holds one rank's shard (its heads, kv heads and MLP slice; the spec says so)
  // and `comm` joins the ranks: device buffers, collectives enqueued on cuda_stream() (NCCL).
  // Each step then all-reduces the outputs of o and down before the residual add. The
  // row-parallel biases, whole on rank 0 and zeros elsewhere, are summed here once, so every
  // rank adds the same bias after the sum. Every rank of the group calls it (collective);
  // `comm` must outlive the model. A communicator with host buffers is refused.
  // With a 16-bit head, the head is vocab-parallel too unless WEFT_TP_VOCAB_PARALLEL=0 (read
  // here): each rank multiplies its 1/N of the vocabulary's rows, an all-gather puts the logits
  // together on every rank (docs/parallel.md).
  Result<void> set_tensor_parallel(parallel::Communicator& comm);
  // Whether steps split the head's vocabulary over the group (set_tensor_parallel).
  bool vocab_parallel_head() const noexcept;
  // Steps of at least this many tokens all-reduce o's and down's outputs as bf16 (bf16 models,
  // WEFT_TP_BF16_REDUCE_TOKENS read by set_tensor_parallel); 0: always fp32.
  int bf16_reduce_tokens() const noexcept;
  // What memory the group's collectives run on (WEFT_TP_NCCL_BUFFERS, read by
  // set_tensor_parallel; docs/parallel.md): "plain device memory" or the communicator's
  // description of its registered or symmetric memory, and whether each falls back.
  std::string tensor_parallel_buffers() const;
  // Steps of up to this many tokens run o's and down's all-reduces fused with the residual add
  // and norm after them, one kernel over NCCL's device API (WEFT_TP_FUSED_NORM, read by
  // set_tensor_parallel; docs/parallel.md); 0: NCCL's all-reduce for every step. fused_norm()
  // says which, with the window's description or why not.
  int fused_norm_tokens() const noexcept;
  std::string fused_norm() const;

  struct State;

 private:
  explicit CudaModel(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace weft::model
