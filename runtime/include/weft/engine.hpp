#pragma once
// The embedding API: an Engine runs one model for many concurrent requests on a user's Asio
// executor. Every asynchronous call takes an Asio completion token (a callback, use_future,
// use_awaitable), with the completion signatures given at each call; errors arrive as the
// std::exception_ptr (a weft::Error) — a future's get() and co_await rethrow it.
//
//   weft::Engine engine(io.get_executor(), weft::EngineConfig{.model_dir = "models/weft-tiny"});
//   weft::GenerateRequest request;
//   request.prompt = "Call me Ishmael.";
//   request.sampling.max_tokens = 32;
//   auto stream = co_await engine.submit(std::move(request), asio::use_awaitable);
//   for (;;) {
//     weft::Event event = co_await stream->next(asio::use_awaitable);
//     if (event.kind == weft::Event::Kind::kFinal) break;
//     std::cout << event.text;
//   }
//
// Inside, each stage is an actor (docs/engine.md): the tokenizer, the scheduler (continuous
// batching over a paged KV pool), the executor on a thread of its own, the sampler and the
// detokenizer.

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <cstdint>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/sampling/sampling_params.hpp"
#include "runtime/sampling/sampling_types.hpp"
#include "weft/error.hpp"
#include "weft/response_format.hpp"

namespace weft {

namespace grammar {
class CompiledGrammar;
}
namespace parallel {
class Communicator;  // runtime/parallel/communicator.hpp
}
namespace model {
class Model;           // runtime/model/model.hpp
class ForwardBackend;  // runtime/model/forward_backend.hpp
}  // namespace model

using sampling::SamplingParams;

struct EngineConfig {
  std::string model_dir;  // a Hugging Face folder (config.json, *.safetensors or
                          // pytorch_model.bin, tokenizer.json) or a .gguf file (docs/loading.md)
  std::string spec_file;  // empty: chosen by config.json's architectures
  // Quantize the weight matrices to this block format as they load ("q4_b32", ...;
  // docs/quantization.md); empty keeps the checkpoint's dtype.
  std::string quantize;
  std::string device = "cpu";
  int page_size = 16;                          // tokens per KV page; 1 is token-level
  std::int64_t kv_budget_bytes = 256ll << 20;  // the KV pool, allocated once at start
  // Prefill chunks + decodes per step. 0 (the default): step_token_budget(), 512 on one
  // device and 512 per GPU of a tensor-parallel group (docs/engine.md, "Scheduling defaults").
  int max_tokens_per_step = 0;
  int max_running = 256;              // sequences in one batch at most
  std::string admission = "reserve";  // "reserve" (never over-commit) or "optimistic"
  // The waiting queue's order: "fcfs" (arrival) or "lof" (longest output first: by max_tokens,
  // longest first; for offline batches, docs/engine.md#how-fast-can-this-workload-go).
  std::string schedule_policy = "fcfs";
  // The KV pages' element type: "auto" (f32 on the CPU, bf16 on a GPU), "f32", "bf16",
  // "fp16", "int8" or "fp8" (e4m3). int8 and fp8 keep a scale per (token, kv head) and hold
  // about twice bf16's tokens in the same budget (docs/engine.md#kv-cache-dtype).
  std::string kv_cache_dtype = "auto";
  unsigned cpu_threads = 0;  // 0: one per core
  // On a GPU: > 0 sizes the KV pool from the device instead of kv_budget_bytes, so that the
  // process uses this fraction of the GPU's memory in all (weights, buffers, KV).
  double gpu_memory_fraction = 0.0;
  // Constrained generation: where the grammar admits exactly one continuation, append its
  // tokens without sampling them (jump-forward decoding, docs/grammars.md).
  bool jump_forward = true;
  // Prefix caching: finished requests' full KV pages stay in a radix tree, shared by every
  // later request that starts with the same tokens (docs/engine.md#prefix-caching); the
  // pages are evicted, least recently used first, when the pool needs them.
  bool prefix_cache = true;
  // Overlap each step's detokenizing (text, stop strings) and the ending of its finished
  // sequences with the next step's forward pass (docs/engine.md#step-loop); the output is the
  // same either way. false: the strictly serial loop, for comparisons.
  bool overlap_steps = true;
  // Not empty: write one JSON line per planned step to this file (what the step runs, who it
  // admitted, the KV pages held; docs/engine.md#step-trace), e.g. to compare a run with
  // bench/sched_sim_bench's simulation of the same workload.
  std::string step_trace_path;
  // KV-Compress (docs/kv-compress.md): after a prompt is prefilled, each (layer, kv head)
  // evicts this share of its cached tokens (in whole pages), those the last
  // kv_compress_window prompt tokens attended to least; the pages freed go back to the pool.
  // 0 (the default) turns it off. In [0, 1); the CPU only; not with speculate.
  double kv_compress_rate = 0.0;
  int kv_compress_window = 16;
  // How a layer's kv heads share the eviction: "uniform" (each evicts the same count, the
  // default) or "variable" (KV-Compress's per-head budgets: the least-attended pages' worth
  // first, whichever head holds them; the CPU backend, not with tensor or pipeline
  // parallelism so far).
  std::string kv_compress_heads = "uniform";
  // Speculative decoding (docs/speculative.md): "" (off), "prompt-lookup" (n-gram lookup in
  // the request's own tokens) or "draft" (draft_model_dir, a model with the same tokenizer,
  // run where draft_device says). spec_tokens: the draft's depth (tokens of one path); spec_width:
  // the tree's width (1: a chain); spec_step_budget: draft tokens one step verifies over all its
  // sequences (turns speculation down as the batch grows).
  std::string speculate;
  std::string draft_model_dir;
  int spec_tokens = 4;
  int spec_width = 1;
  int spec_step_budget = 32;
  std::int64_t draft_kv_budget_bytes = 64ll << 20;
  // Where the draft model runs: "auto" (the target's device: its GPU, with weights, KV pages
  // and CUDA graphs of its own, when the target runs on one) or "cpu".
  std::string draft_device = "auto";
  // Called on the constructing thread while the weights upload to a GPU (bytes done, bytes
  // in all), e.g. for a progress bar. Not read from a config file.
  std::function<void(std::size_t done, std::size_t total)> on_load_progress;
  // Tensor parallelism (docs/parallel.md): the group this engine leads, as rank 0, on the
  // CPU. Each rank loads its shard; the other ranks run parallel::follow_tensor_parallel_
  // leader (runtime/parallel/step_broadcast.hpp), started before this engine. Null or a
  // group of one: the whole model here. Not read from a config file.
  std::shared_ptr<parallel::Communicator> tensor_parallel;
  // Benchmarks and tests: when set, makes the forward backend in place of `device` (the model
  // is loaded as usual and handed over with the KV pool's page count), e.g. a simulated device
  // whose forward pass only takes time (bench/constrained_step_bench.cpp). Not read from a
  // config file.
  std::function<std::unique_ptr<model::ForwardBackend>(const model::Model& model, int num_pages)>
      make_backend;
  // Pipeline parallelism (docs/parallel.md): the group above (of pipeline_parallel x N ranks)
  // cut into this many stages by layers, each a tensor-parallel group of N ranks numbered
  // stage * N + tp rank; rank 0 (stage 0) leads. Each step is cut into micro_batches pieces
  // (0: one per stage) so the stages work at once. The last stage's logits come back to
  // rank 0, whose sampler picks the tokens.
  int pipeline_parallel = 1;
  int micro_batches = 0;
  // Sequence groups in flight (docs/parallel.md): with pipeline_parallel > 1 the running
  // sequences are split into this many groups whose steps are in the pipeline at once (while
  // the last stage runs one group's step, the first runs another's). 0: one per stage; 1: one
  // step at a time. Every rank must be given the same value. Ignored without a pipeline, and
  // 1 with speculative decoding.
  int pp_groups = 0;
  // GPU/CPU hybrid in one process (docs/parallel.md): the last cpu_layers layers and the lm
  // head on the CPU, their KV in host memory, the others on the GPU; or, with
  // gpu_memory_budget_mb > 0, as many last layers as keep the GPU's weights within 3/4 of
  // that budget (its KV pool then takes the rest).
  int cpu_layers = 0;
  std::int64_t gpu_memory_budget_mb = 0;

  // Reads a JSON object with the fields above (unknown fields are an error naming them).
  static Result<EngineConfig> from_file(const std::filesystem::path& path);
  // Every field checked; the error names the field and its allowed range.
  Result<void> validate() const;
  // max_tokens_per_step, or where it is 0 its default: 512 tokens per GPU of the
  // tensor-parallel group (group size / pipeline_parallel ranks) on a CUDA device, else 512.
  int step_token_budget() const;
  // The same for a device and a tensor-parallel size given (a follower rank, which has them
  // but not the leader's group).
  int step_token_budget(bool cuda, int tensor_parallel_ranks) const;
};

// A tool call an assistant message made, as the chat template receives it (OpenAI's
// {"id", "type": "function", "function": {"name", "arguments"}}).
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text; an object reaches the template as a dict
};

struct ChatMessage {
  std::string role;          // system, developer, user, assistant, tool
  std::string content;       // OpenAI's null (an assistant turn with only tool calls) is empty
  std::string name;          // optional participant name
  std::string tool_call_id;  // role tool: the call this message answers
  std::vector<ChatToolCall> tool_calls;  // role assistant
};

struct GenerateRequest {
  // Exactly one of these is the prompt.
  std::string prompt;                 // text, encoded with the model's tokenizer
  std::vector<ChatMessage> messages;  // rendered with the model's chat template
  // With messages: the tool definitions (a JSON array of OpenAI's {"type": "function",
  // "function": {...}}), given to the chat template as `tools`; empty for none.
  std::string tools;
  std::vector<std::int32_t> prompt_ids;  // token ids as they are
  bool add_special_tokens = true;        // for `prompt`: BOS etc. as the tokenizer adds them
  SamplingParams sampling;
  // Constrained generation: JSON Schema, JSON object, regex or EBNF grammar. Every sample of
  // the request follows it.
  ResponseFormat response_format;
  // Encoder-decoder models (T5, M2M100/NLLB; docs/seq2seq.md), where the prompt is the
  // encoder's input: decoder tokens forced after the decoder's start token before generating
  // (NLLB's target language code). Neither streamed nor counted as output. Empty for
  // decoder-only models.
  std::vector<std::int32_t> decoder_prefix_ids;
};

// Embeddings from an encoder-only model (BERT family, docs/embeddings.md): each input is run
// whole, prefill only, batched with other requests' inputs, and its last hidden states pooled
// into one vector.
enum class EmbeddingPooling { kModelDefault, kMean, kCls };

struct EmbedRequest {
  // Exactly one of these holds the inputs.
  std::vector<std::string> texts;  // encoded with special tokens ([CLS] ... [SEP])
  std::vector<std::vector<std::int32_t>> token_ids;  // ids as they are
  EmbeddingPooling pooling = EmbeddingPooling::kModelDefault;
  std::optional<bool> normalize;  // L2-normalize; unset: the model's default
  // An input longer than the model's positions: false, the request fails naming the input,
  // its token count and the limit; true, it is cut to the limit, keeping its leading tokens
  // and, for a text, the special tokens the tokenizer adds around it ([CLS] ... [SEP]).
  bool truncate = false;
};

struct EmbedResult {
  std::vector<std::vector<float>> embeddings;  // one per input, in order
  int prompt_tokens = 0;                       // tokens of every input, special ones included
};

enum class FinishReason { kStop, kLength, kCancelled, kShutdown, kError };
std::string_view to_string(FinishReason reason) noexcept;

struct TokenLogprobs {
  std::int32_t id = 0;
  float logprob = 0;
  std::vector<sampling::TokenLogprob> top;  // when SamplingParams::logprobs > 0
};

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  // Prompt tokens whose KV came from the prefix cache (not computed), as OpenAI's
  // usage.prompt_tokens_details.cached_tokens.
  int cached_tokens = 0;
};

struct Event {
  enum class Kind { kDelta, kFinal };
  Kind kind = Kind::kDelta;
  int index = 0;                        // which of the request's n samples (0 when n = 1)
  std::string text;                     // kDelta: valid UTF-8, stop strings withheld
  std::vector<std::int32_t> token_ids;  // kDelta: the tokens this text came from
  std::vector<TokenLogprobs> logprobs;  // kDelta: one per token
  FinishReason finish_reason = FinishReason::kStop;  // kFinal
  Usage usage;                                       // kFinal
  std::string error;                                 // kFinal with kError
};

// The events of one request: for each of its n samples (Event::index), deltas in order and
// then exactly one final event; samples interleave. The stream ends after n final events.
class RequestStream : public std::enable_shared_from_this<RequestStream> {
 public:
  using Signature = void(std::exception_ptr, Event);

  explicit RequestStream(std::uint64_t id, int samples = 1)
      : id_(id), samples_(samples), ended_(static_cast<std::size_t>(samples > 0 ? samples : 1)) {}
  std::uint64_t id() const noexcept { return id_; }

  // The next event. After the last final event has been taken, fails with kOutOfRange. One
  // call at a time.
  template <class Token>
  auto next(Token&& token) {
    return boost::asio::async_initiate<Token, Signature>(
        [self = shared_from_this()](auto handler) {
          self->next_impl(boost::asio::any_completion_handler<Signature>(std::move(handler)));
        },
        token);
  }

  // For the engine's actors: queue an event for the reader. An event for a sample whose final
  // event was already pushed is dropped: a cancel ends a sample at once, while the
  // detokenizer (another strand) may still be turning that sample's last step into text.
  void push(Event event);

 private:
  void next_impl(boost::asio::any_completion_handler<Signature> handler);

  std::uint64_t id_;
  std::mutex mutex_;
  std::deque<Event> events_;
  std::optional<boost::asio::any_completion_handler<Signature>> waiting_;
  int samples_;
  int finals_taken_ = 0;
  std::vector<char> ended_;  // per sample: 1 once its final event was pushed
};

// Where the step loop's time goes (docs/engine.md#step-phases): each phase summed over
// every step, in microseconds of the clock on the scheduler's strand. Phases that overlap the
// forward pass on a GPU (mask_wait, detokenize_wait, sampler_prepare, part of sample) cost
// the device nothing until they outlast it; the others are time the device sits idle between
// one step's sampled tokens and the next launch.
struct StepPhaseTimes {
  std::uint64_t plan_us = 0;   // Scheduler::plan_step
  std::uint64_t batch_us = 0;  // the StepBatch and sampling rows built from the plan
  // From the launch to the executor's reply: on a GPU the host's preparation of the step and
  // its kernel launches (the forward runs on after the reply), on the CPU the whole forward.
  std::uint64_t launch_us = 0;
  // Of launch_us, the backend's host-side preparation of its inputs (the CUDA model's
  // per-step metadata and its upload); 0 on backends that do not measure it.
  std::uint64_t launch_prepare_us = 0;
  std::uint64_t mask_wait_us = 0;        // waiting for constrained rows' masks after launch
  std::uint64_t detokenize_wait_us = 0;  // waiting for the detokenizer's reply
  std::uint64_t sampler_prepare_us = 0;  // a GPU's draws described (sampler actor)
  // The draws: on a GPU the device sampling call (it waits for the forward pass to end), on
  // the CPU the sampler actor sampling the rows.
  std::uint64_t sample_us = 0;
  std::uint64_t sampler_finish_us = 0;  // a GPU's draws completed on the host
  // Scheduler::complete_step, the beams' step, and the step's tokens turned into messages.
  std::uint64_t complete_us = 0;
  std::uint64_t accept_wait_us = 0;  // constrained rows: waiting for the matchers' verdicts
  std::uint64_t finish_us = 0;       // ending sequences (pages back, final events)
  std::uint64_t step_us = 0;         // every step whole, from its plan to the next plan
  // From the end of a step's forward pass as the loop learns it (on a GPU the device sampling
  // reply, on the CPU the logits) to the next step's launch, while there is a next step: on a
  // GPU the device idles through it, and through the next launch's host preparation.
  std::uint64_t gap_us = 0;
  // Steps whose detokenizing overlapped the next step (docs/engine.md#step-loop).
  std::uint64_t overlapped_steps = 0;
  // Sequences a stop string ended while the next step, already launched, ran them: that
  // step's token for each was dropped (never streamed, never counted).
  std::uint64_t dropped_tokens = 0;
};

struct EngineMetrics {
  int running = 0;
  int waiting = 0;
  int kv_pages_total = 0;
  int kv_pages_used = 0;  // pages live requests hold (cached pages nobody uses not counted)
  int kv_pages_peak = 0;
  // The pool's element type as resolved ("f32", "bf16", "fp16", "int8", "fp8"), its bytes
  // per page (scales included) and the tokens it holds (pages * page_size).
  std::string kv_cache_dtype;
  std::int64_t kv_page_bytes = 0;
  std::int64_t kv_pool_tokens = 0;
  // Prefix caching: pages the cache holds (some may be in use too), prompt tokens looked up
  // at admission and the part found (not computed again), pages evicted for new work.
  int kv_pages_cached = 0;
  std::uint64_t prefix_cache_query_tokens = 0;
  std::uint64_t prefix_cache_hit_tokens = 0;
  std::uint64_t prefix_cache_evictions = 0;
  std::uint64_t steps = 0;
  // Pipeline sequence groups (EngineConfig::pp_groups): the most steps that were in the
  // pipeline at once (submitted, not yet collected); 0 without groups.
  int steps_in_flight_peak = 0;
  std::uint64_t preemptions = 0;
  // KV-Compress: sequences compressed, and the KV pages their compressions gave back.
  std::uint64_t kv_compressions = 0;
  std::uint64_t kv_compressed_pages = 0;
  std::uint64_t prompt_tokens = 0;
  std::uint64_t generated_tokens = 0;
  std::uint64_t finished_stop = 0;
  std::uint64_t finished_length = 0;
  std::uint64_t finished_cancelled = 0;
  std::uint64_t finished_shutdown = 0;
  std::uint64_t finished_error = 0;
  // Constrained generation (docs/grammars.md). Masks for step N+1 are computed by the
  // constraint actor while the executor runs step N+1's forward pass: mask_compute_us is that
  // work, mask_wait_us the part of it the step loop still waited for once the logits were
  // ready (not hidden by the forward pass). constraint_accept_us is the time spent advancing
  // matchers by sampled tokens (on the step loop's path: cheap, except where the grammar may
  // end and the next mask is computed at once to see whether anything may follow).
  // forward_us: every step's time from launch to logits. On a GPU, which samples where the
  // logits are, the launch replies at once: forward_us then runs from launch to the sampled
  // tokens, and mask_wait_us is the wait for masks after the launch, while the GPU computes
  // (an upper bound on the part not hidden).
  std::uint64_t constrained_steps = 0;
  std::uint64_t masks_computed = 0;
  std::uint64_t mask_compute_us = 0;
  std::uint64_t mask_wait_us = 0;
  std::uint64_t constraint_accept_us = 0;
  std::uint64_t forward_us = 0;
  std::uint64_t constrained_forward_us = 0;  // forward_us of the constrained steps only
  // Output tokens the grammar forced (jump-forward decoding): appended without being sampled,
  // and counted in generated_tokens too.
  std::uint64_t jump_forward_tokens = 0;
  // Speculative decoding (docs/speculative.md): draft slices verified, the draft tokens they
  // proposed and the ones accepted. Each verification also yields one token of the target's,
  // so the mean acceptance length (tokens per verification) is
  // 1 + accepted / verifications.
  std::uint64_t speculative_verifications = 0;
  std::uint64_t speculative_draft_tokens = 0;
  std::uint64_t speculative_accepted_tokens = 0;
  StepPhaseTimes step_phases;
};

class Engine {
 public:
  // Loads the model (blocking, with progress on stderr at WEFT_LOG=info) and starts the
  // actors. `executor` runs the light actors; the forward pass runs on a thread of its own.
  // Throws weft::Error when the config or the model folder is bad.
  Engine(const boost::asio::any_io_executor& executor, EngineConfig config);
  ~Engine();  // shuts down if not done yet, and waits for it
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  using SubmitSignature = void(std::exception_ptr, std::shared_ptr<RequestStream>);
  using DoneSignature = void(std::exception_ptr);
  using MetricsSignature = void(std::exception_ptr, EngineMetrics);

  // Validates and tokenizes the request, compiles its response_format, and queues it. Errors:
  // an invalid sampling parameter (naming it and its range), a response_format that does not
  // compile ("response_format: ..." naming the schema keyword and its JSON pointer, the
  // regex offset or the grammar's line and column), an empty or over-long prompt, max_tokens beyond
  // the context, a request that could never fit the KV pool, or an engine shutting down
  // (kShutdown).
  template <class Token>
  auto submit(GenerateRequest request, Token&& token) {
    return boost::asio::async_initiate<Token, SubmitSignature>(
        [this](auto handler, GenerateRequest r) {
          submit_impl(std::move(r),
                      boost::asio::any_completion_handler<SubmitSignature>(std::move(handler)));
        },
        token, std::move(request));
  }

  using EmbedSignature = void(std::exception_ptr, EmbedResult);

  // Embeds the request's inputs (encoder-only models; a decoder-only engine fails with
  // kUnsupported). Errors: no inputs, both texts and token ids, an input empty after
  // tokenization or longer than the model's positions, a token id outside the vocabulary
  // (each naming input[i]), or an engine shutting down (kShutdown).
  template <class Token>
  auto embed(EmbedRequest request, Token&& token) {
    return boost::asio::async_initiate<Token, EmbedSignature>(
        [this](auto handler, EmbedRequest r) {
          embed_impl(std::move(r),
                     boost::asio::any_completion_handler<EmbedSignature>(std::move(handler)));
        },
        token, std::move(request));
  }

  // Ends a live request (all its samples) with finish reason kCancelled and frees its KV
  // pages at once. An unknown or finished id is a no-op.
  void cancel(std::uint64_t request_id);

  // Graceful shutdown: no new requests; live ones end with finish reason kShutdown; the
  // actors stop. Completes when everything has stopped.
  template <class Token>
  auto shutdown(Token&& token) {
    return boost::asio::async_initiate<Token, DoneSignature>(
        [this](auto handler) {
          shutdown_impl(boost::asio::any_completion_handler<DoneSignature>(std::move(handler)));
        },
        token);
  }

  template <class Token>
  auto metrics(Token&& token) {
    return boost::asio::async_initiate<Token, MetricsSignature>(
        [this](auto handler) {
          metrics_impl(boost::asio::any_completion_handler<MetricsSignature>(std::move(handler)));
        },
        token);
  }

  // What the engine runs: useful for clients that size requests.
  int vocab_size() const;
  int context_length() const;
  // Whether the model is encoder-only: embed() works and submit() does not.
  bool embeds() const;
  int embedding_size() const;  // 0 for a decoder-only model
  // Whether the model is encoder-decoder (T5, M2M100/NLLB): the prompt is the encoder's input
  // and the output the decoder's (docs/seq2seq.md).
  bool encoder_decoder() const;

 private:
  void submit_impl(GenerateRequest request,
                   boost::asio::any_completion_handler<SubmitSignature> handler);
  void shutdown_impl(boost::asio::any_completion_handler<DoneSignature> handler);
  void metrics_impl(boost::asio::any_completion_handler<MetricsSignature> handler);
  void embed_impl(EmbedRequest request,
                  boost::asio::any_completion_handler<EmbedSignature> handler);
  void start(GenerateRequest request, std::shared_ptr<const grammar::CompiledGrammar> grammar,
             boost::asio::any_completion_handler<SubmitSignature> handler);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weft
