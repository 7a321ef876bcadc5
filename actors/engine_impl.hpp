#pragma once
// The Engine's state (runtime/include/weft/engine.hpp): the loaded model, the actors and the
// threads they run on. Private to actors/engine.cpp (construction, lifecycle) and
// actors/engine_submit.cpp (submit).

#include <algorithm>
#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "actors/constraint_actor.hpp"
#include "actors/detokenizer_actor.hpp"
#include "actors/embedding_engine.hpp"
#include "actors/executor_actor.hpp"
#include "actors/kv_allocator_actor.hpp"
#include "actors/sampler_actor.hpp"
#include "actors/scheduler_actor.hpp"
#include "actors/tokenizer_actor.hpp"
#include "loaders/model_loader.hpp"
#include "runtime/grammar/constraint_compiler.hpp"
#include "weft/engine.hpp"

namespace weft {

namespace asio = boost::asio;

struct Engine::Impl {
  EngineConfig config;
  asio::any_io_executor executor;
  LoadedModel loaded;
  // speculate "draft": the draft model (run by the CPU or a CudaModel of its own)
  std::optional<LoadedModel> draft;
  int context_length = 0;
  // Encoder-decoder models: the most positions a source or a decoder may take (0: no limit).
  int seq2seq_max_positions = 0;
  int vocab_size = 0;
  // The KV pool as EngineMetrics reports it (fixed at start).
  std::string kv_cache_dtype;
  std::int64_t kv_page_bytes = 0, kv_pool_tokens = 0;

  // The executor actor's own thread: a forward step blocks it, and nothing else.
  asio::io_context device_context{1};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> device_work;
  std::thread device_thread;

  std::unique_ptr<actors::ExecutorActor> executor_actor;
  std::unique_ptr<actors::TokenizerActor> tokenizer;
  std::unique_ptr<actors::SamplerActor> sampler;
  std::unique_ptr<actors::DetokenizerActor> detokenizer;
  std::unique_ptr<actors::ConstraintActor> constraint;
  // The scheduler runs on the KV allocator's strand and borrows its pool, so the allocator is
  // made first and destroyed last.
  std::unique_ptr<actors::KvAllocatorActor> kv_allocator;
  std::unique_ptr<actors::SchedulerActor> scheduler;
  // An encoder-only model runs here instead of the generation actors above (all null then).
  std::unique_ptr<actors::EmbeddingEngine> embedding;
  // Response formats compile here, off the actors' executor, so the step loop never waits for
  // one; two threads, so a request waits for its own grammar rather than for another's.
  std::unique_ptr<grammar::ConstraintCompiler> constraint_compiler;
  asio::thread_pool compile_pool{2};
  // After a compile, the grammar's masks are computed here in the background, so fewer of
  // them are computed on first use on the constraint actor's strand (where every constrained
  // sequence's masks are made). Stops early when the engine stops. A quarter of the cores (at
  // least one, at most four): with a different schema per request, one thread falls behind.
  asio::thread_pool warm_pool{static_cast<std::size_t>(
      std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 4, 1, 4))};
  // A step's masks, when several must be computed, are shared out to these threads (none on
  // a machine of 4 cores or fewer, where they would only take turns with the actors).
  std::optional<asio::thread_pool> mask_pool;

  std::atomic<bool> stopping{false};
  std::atomic<bool> stopped{false};
  std::atomic<std::uint64_t> next_id{1};
  std::mutex seed_mutex;
  std::mt19937_64 seed_source{std::random_device{}()};

  std::uint64_t draw_seed() {
    std::lock_guard lock(seed_mutex);
    return seed_source();
  }
};

}  // namespace weft
