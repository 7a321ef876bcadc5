// The Engine facade: loads the model, wires the actors, and turns the public API's calls into
// messages (submit and its checks are in engine_submit.cpp). docs/engine.md describes the flow.

#include "weft/engine.hpp"

#include <algorithm>
#include <atomic>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_future.hpp>
#include <fstream>
#include <future>
#include <random>
#include <sstream>
#include <thread>

#include "actors/completion.hpp"
#include "actors/constraint_actor.hpp"
#include "actors/detokenizer_actor.hpp"
#include "actors/device_backend.hpp"
#include "actors/embedding_engine.hpp"
#include "actors/engine_impl.hpp"
#include "actors/engine_seq2seq.hpp"
#include "actors/executor_actor.hpp"
#include "actors/kv_allocator_actor.hpp"
#include "actors/pipeline_stages.hpp"
#include "actors/sampler_actor.hpp"
#include "actors/scheduler_actor.hpp"
#include "actors/tokenizer_actor.hpp"
#include "loaders/chat_template_file.hpp"
#include "loaders/gguf_model.hpp"
#include "loaders/gguf_tokenizer.hpp"
#include "loaders/model_loader.hpp"
#include "loaders/tokenizer_json.hpp"
#include "runtime/grammar/constraint_compiler.hpp"
#include "runtime/grammar/token_constraint.hpp"
#include "runtime/grammar/tokenizer_vocab.hpp"
#include "runtime/parallel/step_broadcast.hpp"
#include "runtime/scheduler/speculation_env.hpp"
#include "runtime/speculative/draft_model.hpp"
#include "runtime/speculative/prompt_lookup.hpp"
#include "weft/log.hpp"

namespace weft {

namespace asio = boost::asio;

namespace {

std::string read_file_or_empty(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  return text.str();
}

}  // namespace

// The speculator EngineConfig::speculate names; a draft model is loaded here and must share the
// target's tokenizer (the same vocabulary size and tokenizer.json).
// On a GPU target (draft_device "auto"), the draft runs on the same GPU: its own weights, KV
// pages (draft_kv_budget_bytes) and CUDA graphs, in what the target's pool left of the device.
static std::unique_ptr<speculative::Speculator> make_speculator(
    const EngineConfig& config, int vocab_size, bool token_trees,
    std::optional<LoadedModel>& draft_slot, const actors::DeviceChoice& device) {
  if (!token_trees && config.spec_width > 1) {
    log_info("engine: the " + config.device +
             " backend has no tree attention yet; speculating with chains (spec_width 1)");
  }
  if (config.speculate == "prompt-lookup") {
    return std::make_unique<speculative::PromptLookup>();
  }
  log_info("engine: loading the draft model " + config.draft_model_dir);
  auto draft = load_model(config.draft_model_dir);
  if (!draft) {
    throw Error(draft.error().code(), "draft_model_dir: " + std::string(draft.error().what()));
  }
  draft_slot = std::move(draft.value());
  const model::Model& model = draft_slot->model;
  if (model.spec().vocab_size != vocab_size) {
    throw Error(ErrorCode::kInvalidArgument,
                "draft_model_dir: " + config.draft_model_dir + " has a vocabulary of " +
                    std::to_string(model.spec().vocab_size) + " tokens but the model has " +
                    std::to_string(vocab_size) + "; a draft model needs the same tokenizer");
  }
  const auto target_tokenizer =
      read_file_or_empty(std::filesystem::path(config.model_dir) / "tokenizer.json");
  const auto draft_tokenizer =
      read_file_or_empty(std::filesystem::path(config.draft_model_dir) / "tokenizer.json");
  if (target_tokenizer != draft_tokenizer) {
    throw Error(ErrorCode::kInvalidArgument,
                "draft_model_dir: " + config.draft_model_dir +
                    "/tokenizer.json differs from the model's; a draft model needs the same "
                    "tokenizer");
  }
  const bool on_gpu = device.cuda && config.draft_device == "auto";
  model::KvLayout layout = model.kv_layout(config.page_size);
  if (on_gpu) layout.dtype = KvDtype::kBF16;
  const auto page_bytes = static_cast<std::int64_t>(layout.bytes_per_page());
  const auto pages = static_cast<int>(std::min<std::int64_t>(
      std::max<std::int64_t>(1, config.draft_kv_budget_bytes / page_bytes), 1 << 24));
  const unsigned threads = config.cpu_threads == 0
                               ? std::max(1u, std::thread::hardware_concurrency())
                               : config.cpu_threads;
  // Steps of the draft: a pass per depth over every decoding sequence's frontier, and catch-up
  // passes of up to 512 tokens a sequence (a larger step grows the buffers once).
  auto backend = actors::make_forward_backend(model, on_gpu ? device : actors::DeviceChoice{},
                                              layout, pages, threads, config.max_tokens_per_step);
  if (!backend) {
    throw Error(backend.error().code(),
                "draft_model_dir: " + config.draft_model_dir + " on " +
                    actors::device_name(on_gpu ? device : actors::DeviceChoice{}) + ": " +
                    backend.error().what());
  }
  log_info("engine: draft model on " +
           actors::device_name(on_gpu ? device : actors::DeviceChoice{}) + ", KV pool of " +
           actors::describe_kv_pool(layout, pages));
  return std::make_unique<speculative::DraftModel>(std::move(backend.value()), config.page_size);
}

Engine::Engine(const asio::any_io_executor& executor, EngineConfig config)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  if (auto ok = config.validate(); !ok) throw ok.error();
  s.config = std::move(config);
  s.config.max_tokens_per_step = s.config.step_token_budget();  // 0: the default for the group
  s.executor = executor;
  // Opened before anything starts, so that a path that cannot be written fails here.
  std::unique_ptr<std::ofstream> step_trace;
  if (!s.config.step_trace_path.empty()) {
    step_trace = std::make_unique<std::ofstream>(s.config.step_trace_path,
                                                 std::ios::binary | std::ios::trunc);
    if (!*step_trace) {
      throw Error(ErrorCode::kIo,
                  "step trace: " + s.config.step_trace_path + ": cannot be written");
    }
  }

  LoadOptions load_options;
  load_options.spec_file = s.config.spec_file;
  if (!s.config.quantize.empty()) {
    load_options.quantize = quant::parse_quant_type(s.config.quantize).value();
  }
  parallel::Communicator* group = s.config.tensor_parallel.get();
  const int stages = s.config.pipeline_parallel;
  if (group != nullptr && group->size() > 1) {
    if (group->size() % stages != 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  "pipeline_parallel " + std::to_string(stages) + " does not divide the " +
                      std::to_string(group->size()) + " ranks of the group");
    }
    // Ranks are stage * N + tp rank (docs/parallel.md); the leader is rank 0 of stage 0.
    const int tp = group->size() / stages;
    load_options.tensor_parallel_size = tp;
    load_options.tensor_parallel_rank = group->rank() % tp;
    load_options.pipeline_parallel_size = stages;
    load_options.pipeline_stage = group->rank() / tp;
  } else if (stages > 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "pipeline_parallel " + std::to_string(stages) +
                    " needs a group of processes (EngineConfig::tensor_parallel, from mpirun)");
  } else {
    group = nullptr;
  }
  log_info("engine: loading " + s.config.model_dir);
  // Until the leader backend exists the followers wait for the pool's size: an error before
  // then tells them there will be none (once it exists, its destructor stops them).
  // Sequence groups: the followers take the leader's messages point to point.
  auto device = actors::parse_device(s.config.device);
  if (!device) throw device.error();
  const bool gpu_stages = device->cuda;
  const int pp_groups =
      actors::pipeline_groups(group != nullptr ? stages : 1, s.config.pp_groups, gpu_stages);
  struct StopFollowers {
    parallel::Communicator* group;
    bool point_to_point;
    ~StopFollowers() {
      if (group != nullptr) parallel::stop_tensor_parallel_followers(*group, point_to_point);
    }
  } stop_followers{group, pp_groups > 1};
  // Refused after stop_followers exists, so the followers (which run one group then) are told.
  if (group != nullptr) {
    if (auto ok = actors::check_pipeline_groups(stages, s.config.pp_groups, gpu_stages); !ok) {
      throw ok.error();
    }
  }
  load_options.allow_encoder = group == nullptr;
  load_options.allow_seq2seq = group == nullptr;
  // KV-Compress under tensor parallelism: each rank scores and compacts its own kv heads (the
  // step broadcast carries the slot offsets and evictions; CTests
  // weft_generate_tensor_parallel_kv_compress and its _cuda twin); pipelines are refused so far.
  if (group != nullptr && s.config.kv_compress_rate > 0.0 && stages > 1) {
    throw Error(ErrorCode::kUnsupported,
                "kv_compress_rate > 0: not with pipeline parallelism so far");
  }
  // Variable per-head budgets: the CPU forward pass reads each head's cells
  // (docs/kv-compress.md); the CUDA kernels read one slot offset per sequence, and under
  // tensor parallelism each rank would share its layer's budget among its own heads only.
  if (s.config.kv_compress_rate > 0.0 && s.config.kv_compress_heads == "variable") {
    if (device->cuda) {
      throw Error(ErrorCode::kUnsupported,
                  "kv_compress_heads \"variable\": the CPU backend only so far (the CUDA "
                  "attention kernels read one slot offset per sequence); use \"uniform\" on "
                  "the GPU");
    }
    if (group != nullptr) {
      throw Error(ErrorCode::kUnsupported,
                  "kv_compress_heads \"variable\": not with tensor or pipeline parallelism so "
                  "far (use \"uniform\")");
    }
  }
  auto loaded = load_model(s.config.model_dir, load_options);
  if (!loaded) throw loaded.error();
  if (loaded->encoder) {
    auto tokenizer = loaders::load_tokenizer(s.config.model_dir);
    if (!tokenizer) throw tokenizer.error();
    s.vocab_size = loaded->encoder->spec().vocab_size;
    s.context_length = loaded->encoder->max_sequence_length();
    s.embedding = std::make_unique<actors::EmbeddingEngine>(
        executor, std::move(loaded.value()), tokenizer->tokenizer, s.config.max_tokens_per_step,
        s.config.cpu_threads, *device);
    log_info("engine: encoder-only model; embeddings on " + s.embedding->backend_description());
    return;
  }
  s.loaded = std::move(loaded.value());
  // An encoder-decoder model (docs/seq2seq.md) runs through the same actors with its own
  // backend; `model` is then empty and `model_spec` is the decoder's.
  const bool seq2seq = s.loaded.seq2seq.has_value();
  if (seq2seq) {
    if (auto ok = actors::check_seq2seq_config(s.config); !ok) throw ok.error();
  }
  const model::Model& model = s.loaded.model;
  const model::ModelSpec& model_spec = seq2seq ? s.loaded.seq2seq->spec() : model.spec();
  s.vocab_size = model_spec.vocab_size;
  std::vector<std::int32_t> eos(s.loaded.generation.eos_token_ids.begin(),
                                s.loaded.generation.eos_token_ids.end());
  // The matcher's vocabulary is read from tokenizer.json (or a GGUF file's tokenizer metadata)
  // and its token trie built (~0.1-0.2 s for 128K tokens) while the weights go to the device;
  // the constructor waits for it at the end, so the first constrained request does not pay
  // for it in its time to first token.
  // (Encoder-decoder models refuse constrained output: no compiler.)
  const auto model_path = std::filesystem::path(s.config.model_dir);
  std::future<void> trie_ready;
  if (!seq2seq) {
    s.constraint_compiler = std::make_unique<grammar::ConstraintCompiler>(
        [model_path]() -> Result<grammar::TokenizerVocab> {
          auto text = read_tokenizer_json_text(model_path);
          if (!text) return text.error();
          return grammar::vocab_from_tokenizer_json(*text);
        },
        eos);
    // (A failure is not kept: the first constrained request tries again and reports it.)
    auto trie_built = std::make_shared<std::promise<void>>();
    trie_ready = trie_built->get_future();
    asio::post(s.compile_pool, [compiler = s.constraint_compiler.get(), trie_built] {
      (void)compiler->trie();
      trie_built->set_value();
    });
  }
  // Encoder-decoder models have no fixed context (T5's relative positions, M2M100's
  // sinusoidal ones are computed for any position): the KV pool bounds a request.
  s.context_length = seq2seq ? 0 : model_spec.rope.max_position_embeddings;
  if (s.config.kv_compress_rate > 0.0 &&
      (model_spec.position == model::PositionEmbedding::kAlibi || model_spec.sliding_window > 0)) {
    throw Error(ErrorCode::kUnsupported,
                "kv_compress_rate > 0: " + model_spec.architecture +
                    " uses ALiBi or a sliding window, whose attention depends on distances "
                    "that compacted slots no longer keep");
  }

  // An encoder-decoder folder may come without a tokenizer (random-weight test models):
  // requests then give prompt_ids and stream ids without text.
  std::shared_ptr<const text::Tokenizer> text_tokenizer;
  if (auto tokenizer = loaders::load_tokenizer(s.config.model_dir); tokenizer) {
    text_tokenizer = tokenizer->tokenizer;
  } else {
    std::error_code ec;
    if (!seq2seq || std::filesystem::exists(model_path / "tokenizer.json", ec)) {
      throw tokenizer.error();
    }
    log_info("engine: " + s.config.model_dir + " has no tokenizer.json; prompts must be ids");
  }
  std::optional<ChatTemplate> chat_template;
  std::string chat_template_error;
  if (auto t = load_chat_template(s.config.model_dir, /*with_tools=*/false); t) {
    chat_template = std::move(t.value());
  } else {
    chat_template_error = t.error().what();
  }

  if (group != nullptr) {
    device = actors::tensor_parallel_device(*device, group->rank());
    if (!device) throw device.error();
  }
  if (seq2seq) s.seq2seq_max_positions = actors::seq2seq_max_positions(*device);
  auto kv_dtype = actors::resolve_kv_cache_dtype(s.config.kv_cache_dtype, *device);
  if (!kv_dtype) throw kv_dtype.error();
  model::KvLayout layout = seq2seq ? s.loaded.seq2seq->kv_layout(s.config.page_size)
                                   : model.kv_layout(s.config.page_size);
  layout.dtype = *kv_dtype;
  const auto page_bytes = static_cast<std::int64_t>(actors::kv_page_bytes(*device, layout));
  // On a GPU with gpu_memory_fraction set, the backend sizes its pool from the device (0
  // pages asked); otherwise the byte budget decides.
  const bool from_device = device->cuda && s.config.gpu_memory_fraction > 0.0;
  const std::int64_t budget_pages = s.config.kv_budget_bytes / page_bytes;
  if (!from_device && (budget_pages < 1 || budget_pages > (1 << 30))) {
    throw Error(ErrorCode::kInvalidArgument,
                "kv_budget_bytes: " + std::to_string(s.config.kv_budget_bytes) + " holds " +
                    std::to_string(budget_pages) + " pages of " + std::to_string(page_bytes) +
                    " bytes; need at least one");
  }
  actors::StageOptions stage_options;
  stage_options.num_pages = from_device ? 0 : static_cast<int>(budget_pages);
  stage_options.cpu_threads = s.config.cpu_threads;
  stage_options.max_tokens_per_step = s.config.max_tokens_per_step;
  stage_options.gpu_memory_fraction = s.config.gpu_memory_fraction;
  stage_options.on_progress = s.config.on_load_progress;
  const bool hybrid = s.config.cpu_layers > 0 || s.config.gpu_memory_budget_mb > 0;
  Result<std::unique_ptr<model::ForwardBackend>> backend =
      seq2seq                 ? actors::make_seq2seq_backend(*s.loaded.seq2seq, *device, layout,
                                             from_device ? 0 : static_cast<int>(budget_pages),
                                                             s.config.cpu_threads, s.config.max_tokens_per_step,
                                                             s.config.gpu_memory_fraction)
      : s.config.make_backend ? Result<std::unique_ptr<model::ForwardBackend>>(
                                    s.config.make_backend(model, static_cast<int>(budget_pages)))
      : group != nullptr && stages > 1
          ? actors::make_pipeline_leader(
                model, *device, layout, stage_options, *group,
                parallel::pipeline_place(0, group->size() / stages, stages),
                s.config.micro_batches > 0 ? s.config.micro_batches : stages, pp_groups)
      : group != nullptr
          ? actors::make_tensor_parallel_leader(
                model, *device, layout, from_device ? 0 : static_cast<int>(budget_pages),
                s.config.cpu_threads, *group, s.config.max_tokens_per_step,
                s.config.gpu_memory_fraction, s.config.on_load_progress)
      : hybrid ? actors::make_engine_gpu_cpu_hybrid(model, *device, layout, stage_options,
                                                    s.config.cpu_layers,
                                                    s.config.gpu_memory_budget_mb << 20)
               : actors::make_forward_backend(
                     model, *device, layout, from_device ? 0 : static_cast<int>(budget_pages),
                     s.config.cpu_threads, s.config.max_tokens_per_step,
                     s.config.gpu_memory_fraction, s.config.on_load_progress);
  if (!backend) throw backend.error();
  if (!*backend) throw Error(ErrorCode::kInvalidArgument, "make_backend: returned no backend");
  stop_followers.group = nullptr;
  const bool token_trees = (*backend)->supports_token_trees();
  const int exact_verify_rows = (*backend)->exact_verify_rows();
  // Before any thread starts: a draft model that fails to load throws from here.
  std::unique_ptr<speculative::Speculator> speculator;
  if (!s.config.speculate.empty()) {
    speculator = make_speculator(s.config, s.vocab_size, token_trees, s.draft, *device);
  }
  const std::int64_t num_pages = (*backend)->num_pages();
  log_info("engine: KV pool of " + actors::describe_kv_pool(layout, num_pages) + " on " +
           s.config.device);
  s.kv_cache_dtype = kv_dtype_name(layout.dtype);
  s.kv_page_bytes = static_cast<std::int64_t>(layout.bytes_per_page());
  s.kv_pool_tokens = num_pages * layout.page_size;

  s.device_work.emplace(asio::make_work_guard(s.device_context));
  s.device_thread = std::thread([&s] { s.device_context.run(); });
  s.executor_actor = std::make_unique<actors::ExecutorActor>(s.device_context.get_executor(),
                                                             std::move(backend.value()));
  s.tokenizer =
      std::make_unique<actors::TokenizerActor>(executor, text_tokenizer, std::move(chat_template),
                                               std::move(chat_template_error), s.vocab_size);
  s.sampler = std::make_unique<actors::SamplerActor>(executor);
  s.detokenizer = std::make_unique<actors::DetokenizerActor>(executor, text_tokenizer);
  if (const int cores = static_cast<int>(std::thread::hardware_concurrency()); cores > 4) {
    s.mask_pool.emplace(static_cast<std::size_t>(std::clamp(cores / 4, 1, 4)));
  }
  s.constraint = std::make_unique<actors::ConstraintActor>(
      executor, s.vocab_size, s.config.jump_forward, s.mask_pool ? &*s.mask_pool : nullptr);

  sched::SchedulerConfig sc;
  sc.page_size = s.config.page_size;
  sc.num_pages = static_cast<int>(num_pages);
  sc.max_tokens_per_step = s.config.max_tokens_per_step;
  sc.max_running = s.config.max_running;
  sc.admission = s.config.admission == "optimistic" ? sched::AdmissionPolicy::kOptimistic
                                                    : sched::AdmissionPolicy::kReserve;
  sc.schedule = s.config.schedule_policy == "lof" ? sched::SchedulePolicy::kLongestOutputFirst
                                                  : sched::SchedulePolicy::kFirstCome;
  // An encoder-decoder sequence's decoder KV depends on its source, not only its tokens.
  sc.prefix_cache = s.config.prefix_cache && !seq2seq;
  sc.kv_compress = {s.config.kv_compress_rate, s.config.kv_compress_window,
                    s.config.kv_compress_heads == "variable" ? kv::KvCompressHeads::kVariable
                                                             : kv::KvCompressHeads::kUniform};
  s.kv_allocator = std::make_unique<actors::KvAllocatorActor>(executor, sc.num_pages, sc.page_size);
  s.scheduler = std::make_unique<actors::SchedulerActor>(
      *s.kv_allocator, sc, *s.executor_actor, *s.sampler, *s.detokenizer, *s.constraint, eos);
  const bool speculating = speculator != nullptr;
  if (speculator) {
    sched::SpeculationConfig spec;
    spec.max_depth = s.config.spec_tokens;
    spec.max_nodes = s.config.spec_tokens * s.config.spec_width;
    spec.step_budget = s.config.spec_step_budget;
    spec.trees = token_trees;
    spec.max_step_rows = sched::max_step_rows_from_env(exact_verify_rows);
    spec.trace = sched::speculation_trace_from_env();
    s.scheduler->set_speculation(std::move(speculator), spec,
                                 token_trees ? s.config.spec_width : 1);
  }
  // Sequence groups in flight, where the backend lets several steps into its pipeline
  // (speculative decoding keeps one step at a time: it verifies with the host's logits).
  if (!speculating && s.executor_actor->steps_in_flight() > 1) {
    s.scheduler->set_groups(s.executor_actor->steps_in_flight());
    log_info("engine: " + std::to_string(s.executor_actor->steps_in_flight()) +
             " sequence groups in flight in the pipeline");
  }
  if (step_trace) s.scheduler->set_step_trace(std::move(step_trace));
  s.scheduler->set_overlap(s.config.overlap_steps);
  s.scheduler->start();
  if (trie_ready.valid()) trie_ready.wait();
}

Engine::~Engine() {
  Impl& s = *impl_;
  if (s.embedding) {
    s.embedding.reset();  // stops on its own thread; waits for nothing else
    return;
  }
  if (!s.stopped.load()) {
    auto done = shutdown(asio::use_future);
    if (done.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      log_error("engine: shutdown did not finish in 30 s (is the executor still running?)");
    }
  }
  // Messages the scheduler posted while finishing requests must run before the actors go:
  // a reply from each strand proves every earlier message on it has run.
  auto flush = [](auto& actor) {
    auto f = actor->flush(asio::use_future);
    f.wait_for(std::chrono::seconds(5));
  };
  // A compile still running holds a request that must see the engine stopped, not the actors
  // gone.
  s.compile_pool.join();
  s.warm_pool.join();
  flush(s.sampler);
  flush(s.detokenizer);
  flush(s.constraint);
  s.device_work.reset();
  if (s.device_thread.joinable()) s.device_thread.join();
}

int Engine::vocab_size() const {
  return impl_->vocab_size;
}
int Engine::context_length() const {
  return impl_->context_length;
}

bool Engine::embeds() const {
  return impl_->embedding != nullptr;
}
bool Engine::encoder_decoder() const {
  return impl_->loaded.seq2seq.has_value();
}
int Engine::embedding_size() const {
  return impl_->embedding ? impl_->embedding->model().spec().hidden_size : 0;
}

void Engine::cancel(std::uint64_t request_id) {
  if (impl_->scheduler) impl_->scheduler->cancel(request_id);
}

void Engine::metrics_impl(asio::any_completion_handler<MetricsSignature> handler) {
  if (impl_->embedding) return impl_->embedding->metrics(std::move(handler));
  // The scheduler counts pages; the pool's element type and size are the engine's.
  auto executor = asio::get_associated_executor(handler, impl_->executor);
  impl_->scheduler->metrics(
      asio::bind_executor(executor, [&s = *impl_, handler = std::move(handler)](
                                        std::exception_ptr error, EngineMetrics m) mutable {
        m.kv_cache_dtype = s.kv_cache_dtype;
        m.kv_page_bytes = s.kv_page_bytes;
        m.kv_pool_tokens = s.kv_pool_tokens;
        std::move(handler)(error, std::move(m));
      }));
}

void Engine::embed_impl(EmbedRequest request,
                        asio::any_completion_handler<EmbedSignature> handler) {
  Impl& s = *impl_;
  if (!s.embedding) {
    return actors::complete(
        std::move(handler), s.executor,
        std::make_exception_ptr(Error(
            ErrorCode::kUnsupported,
            s.loaded.full_spec.architecture +
                (s.loaded.seq2seq ? " is an encoder-decoder model" : " is a decoder-only model") +
                "; embeddings need an encoder-only one (BERT family, "
                "docs/embeddings.md)")),
        EmbedResult{});
  }
  s.embedding->embed(std::move(request), std::move(handler));
}

void Engine::shutdown_impl(asio::any_completion_handler<DoneSignature> handler) {
  Impl& s = *impl_;
  if (s.embedding) {
    s.stopping.store(true);
    s.embedding->shutdown([&s, handler = std::move(handler)](std::exception_ptr error) mutable {
      s.stopped.store(true);
      actors::complete(std::move(handler), s.executor, error);
    });
    return;
  }
  s.stopping.store(true);
  s.scheduler->shutdown([&s, handler = std::move(handler)](std::exception_ptr error) mutable {
    s.stopped.store(true);
    actors::complete(std::move(handler), s.executor, error);
  });
}

}  // namespace weft
