#include "actors/embedding_engine.hpp"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <chrono>
#include <future>
#include <map>

#include "actors/completion.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "runtime/model/embedding_queue.hpp"
#include "weft/actor.hpp"

namespace weft::actors {

namespace asio = boost::asio;

namespace {

// `full` is a text's ids with special tokens, `plain` without: full = prefix + plain + suffix
// (e.g. [CLS] plain [SEP]). Cuts plain so the whole fits `limit`, keeping prefix and suffix,
// as Hugging Face tokenizers' truncation does. Where plain is not found inside full (a
// normalizer that differs with specials) or the specials alone fill the limit, the first
// `limit` ids are kept.
std::vector<std::int32_t> truncate_keeping_specials(std::vector<std::int32_t> full,
                                                    const std::vector<std::uint32_t>& plain,
                                                    int limit) {
  const auto cap = static_cast<std::size_t>(limit);
  if (full.size() <= cap) return full;
  if (plain.size() < full.size()) {
    const std::size_t specials = full.size() - plain.size();
    for (std::size_t p = 0; p <= specials && specials < cap; ++p) {
      if (!std::equal(
              plain.begin(), plain.end(), full.begin() + static_cast<std::ptrdiff_t>(p),
              [](std::uint32_t a, std::int32_t b) { return static_cast<std::int32_t>(a) == b; })) {
        continue;
      }
      const std::size_t keep = cap - specials;
      std::vector<std::int32_t> out(full.begin(),
                                    full.begin() + static_cast<std::ptrdiff_t>(p + keep));
      out.insert(out.end(), full.begin() + static_cast<std::ptrdiff_t>(p + plain.size()),
                 full.end());
      return out;
    }
  }
  full.resize(cap);
  return full;
}

}  // namespace

// The queue and the model, on the device thread's strand. A step blocks the thread; requests
// that arrive meanwhile wait in the strand's queue and join the next step.
class EmbeddingActor : public Actor {
 public:
  EmbeddingActor(const asio::any_io_executor& device, asio::any_io_executor reply_executor,
                 const model::EncoderModel& model, model::EncoderBackend& backend,
                 int max_tokens_per_step)
      : Actor(device),
        reply_executor_(std::move(reply_executor)),
        model_(model),
        backend_(backend),
        queue_(max_tokens_per_step) {}

  void add(model::EmbedJob job, int prompt_tokens,
           asio::any_completion_handler<Engine::EmbedSignature> handler) {
    post([this, job = std::move(job), prompt_tokens, handler = std::move(handler)]() mutable {
      if (stopped_) {
        return fail(std::move(handler), Error(ErrorCode::kShutdown, "the engine is shutting down"));
      }
      const auto id = job.id;
      // Constructed in place: Boost 1.81's any_completion_handler move-assignment wraps the
      // handler in itself and recurses until the stack runs out.
      waiting_.emplace(id, Waiting{std::move(handler), prompt_tokens});
      queue_.push(std::move(job));
      metrics_.waiting = static_cast<int>(waiting_.size());
      if (!step_posted_) {
        step_posted_ = true;
        post([this] { run_step(); });
      }
    });
  }

  // No new requests; waiting ones fail with kShutdown; then `then` runs on the strand.
  template <class Fn>
  void stop(Fn then) {
    post([this, then = std::move(then)]() mutable {
      stopped_ = true;
      for (auto id : queue_.drain())
        finish_with_error(id, Error(ErrorCode::kShutdown, "the engine is shutting down"),
                          &metrics_.finished_shutdown);
      then();
    });
  }
  const asio::any_io_executor& reply_executor() const noexcept { return reply_executor_; }

  void metrics(asio::any_completion_handler<Engine::MetricsSignature> handler) {
    post([this, handler = std::move(handler)]() mutable {
      complete(std::move(handler), reply_executor_, std::exception_ptr(), metrics_);
    });
  }

 private:
  struct Waiting {
    asio::any_completion_handler<Engine::EmbedSignature> handler;
    int prompt_tokens = 0;
  };

  void fail(asio::any_completion_handler<Engine::EmbedSignature> handler, Error error) {
    complete(std::move(handler), reply_executor_, std::make_exception_ptr(std::move(error)),
             EmbedResult{});
  }

  void finish_with_error(std::uint64_t id, const Error& error, std::uint64_t* counter) {
    auto it = waiting_.find(id);
    if (it == waiting_.end()) return;
    fail(std::move(it->second.handler), error);
    waiting_.erase(it);
    ++*counter;
    metrics_.waiting = static_cast<int>(waiting_.size());
  }

  void run_step() {
    step_posted_ = false;
    if (queue_.empty()) return;
    const auto step = queue_.next_step();
    metrics_.running = static_cast<int>(step.owners.size());
    const auto start = std::chrono::steady_clock::now();
    std::vector<float> hidden;
    auto ok = backend_.encode(step.batch, hidden);
    metrics_.forward_us +=
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                       std::chrono::steady_clock::now() - start)
                                       .count());
    ++metrics_.steps;
    metrics_.running = 0;
    if (!ok) {
      for (auto id : queue_.fail(step))
        finish_with_error(id, ok.error(), &metrics_.finished_error);
    } else {
      metrics_.prompt_tokens += step.batch.tokens.size();
      for (auto& [id, vectors] : queue_.finish(step, hidden, model_.spec().hidden_size)) {
        auto it = waiting_.find(id);
        if (it == waiting_.end()) continue;
        EmbedResult result;
        result.embeddings = std::move(vectors);
        result.prompt_tokens = it->second.prompt_tokens;
        complete(std::move(it->second.handler), reply_executor_, std::exception_ptr(),
                 std::move(result));
        waiting_.erase(it);
        ++metrics_.finished_stop;
      }
    }
    metrics_.waiting = static_cast<int>(waiting_.size());
    if (!queue_.empty() && !step_posted_) {
      step_posted_ = true;
      post([this] { run_step(); });
    }
  }

  asio::any_io_executor reply_executor_;
  const model::EncoderModel& model_;
  model::EncoderBackend& backend_;
  model::EmbeddingQueue queue_;
  std::map<std::uint64_t, Waiting> waiting_;
  EngineMetrics metrics_;
  bool step_posted_ = false;
  bool stopped_ = false;
};

EmbeddingEngine::EmbeddingEngine(const asio::any_io_executor& executor, LoadedModel loaded,
                                 std::shared_ptr<const text::Tokenizer> tokenizer,
                                 int max_tokens_per_step, unsigned cpu_threads, DeviceChoice device)
    : executor_(executor), loaded_(std::move(loaded)), tokenizer_(std::move(tokenizer)) {
  // Made here, once loaded_ holds the model for good: the backend keeps a reference to it.
  auto backend = make_encoder_backend(*loaded_.encoder, device, cpu_threads, max_tokens_per_step);
  if (!backend) throw backend.error();
  backend_ = std::move(backend.value());
  work_.emplace(asio::make_work_guard(device_context_));
  device_thread_ = std::thread([this] { device_context_.run(); });
  actor_ = std::make_unique<EmbeddingActor>(device_context_.get_executor(), executor_,
                                            *loaded_.encoder, *backend_, max_tokens_per_step);
}

EmbeddingEngine::~EmbeddingEngine() {
  stopping_.store(true);
  // A tokenization already posted ends soon (it sees stopping_ or hands its job over); one
  // whose executor no longer runs never starts, so the wait is bounded.
  for (int i = 0; i < 5000 && tokenizing_.load() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // Stopped on the model's thread itself, so this never waits for the caller's executor.
  std::promise<void> done;
  auto stopped = done.get_future();
  actor_->stop([&done] { done.set_value(); });
  stopped.wait();
  work_.reset();
  if (device_thread_.joinable()) device_thread_.join();
}

void EmbeddingEngine::shutdown(asio::any_completion_handler<Engine::DoneSignature> handler) {
  stopping_.store(true);
  auto shared =
      std::make_shared<asio::any_completion_handler<Engine::DoneSignature>>(std::move(handler));
  actor_->stop([shared, executor = actor_->reply_executor()] {
    complete(std::move(*shared), executor, std::exception_ptr());
  });
}

void EmbeddingEngine::metrics(asio::any_completion_handler<Engine::MetricsSignature> handler) {
  actor_->metrics(std::move(handler));
}

void EmbeddingEngine::embed(EmbedRequest request,
                            asio::any_completion_handler<Engine::EmbedSignature> handler) {
  auto fail = [this](asio::any_completion_handler<Engine::EmbedSignature> h, Error error) {
    complete(std::move(h), executor_, std::make_exception_ptr(std::move(error)), EmbedResult{});
  };
  if (stopping_.load()) {
    return fail(std::move(handler), Error(ErrorCode::kShutdown, "the engine is shutting down"));
  }
  if (request.texts.empty() == request.token_ids.empty()) {
    return fail(std::move(handler),
                Error(ErrorCode::kInvalidArgument,
                      request.texts.empty() ? "input: no inputs to embed"
                                            : "input: give texts or token ids, not both"));
  }
  // Tokenized on the caller's executor: the model's thread only runs steps.
  tokenizing_.fetch_add(1);
  asio::post(executor_, [this, fail, request = std::move(request),
                         handler = std::move(handler)]() mutable {
    struct Done {
      std::atomic<int>& count;
      ~Done() { count.fetch_sub(1); }
    } done{tokenizing_};
    if (stopping_.load()) {
      return fail(std::move(handler), Error(ErrorCode::kShutdown, "the engine is shutting down"));
    }
    model::EmbedJob job;
    job.id = next_job_id_.fetch_add(1);
    const auto& spec = model().spec();
    switch (request.pooling) {
      case EmbeddingPooling::kModelDefault:
        job.pooling = spec.encoder.pooling;
        break;
      case EmbeddingPooling::kMean:
        job.pooling = model::Pooling::kMean;
        break;
      case EmbeddingPooling::kCls:
        job.pooling = model::Pooling::kCls;
        break;
    }
    job.normalize = request.normalize.value_or(spec.encoder.normalize);
    const std::size_t n = request.texts.empty() ? request.token_ids.size() : request.texts.size();
    int prompt_tokens = 0;
    const int longest = model().max_sequence_length();
    for (std::size_t i = 0; i < n; ++i) {
      const std::string where = "input[" + std::to_string(i) + "]: ";
      std::vector<std::int32_t> ids;
      if (!request.texts.empty()) {
        auto encoded = tokenizer_->encode(request.texts[i], /*add_special_tokens=*/true);
        if (!encoded) {
          return fail(std::move(handler),
                      Error(encoded.error().code(), where + encoded.error().what()));
        }
        ids.assign(encoded->begin(), encoded->end());
      } else {
        ids = std::move(request.token_ids[i]);
        for (const auto id : ids) {
          if (id < 0 || id >= spec.vocab_size) {
            return fail(std::move(handler), Error(ErrorCode::kInvalidArgument,
                                                  where + "token id " + std::to_string(id) +
                                                      " is outside the vocabulary [0, " +
                                                      std::to_string(spec.vocab_size) + ")"));
          }
        }
      }
      if (ids.empty()) {
        return fail(std::move(handler),
                    Error(ErrorCode::kInvalidArgument, where + "empty after tokenization"));
      }
      if (static_cast<int>(ids.size()) > longest && request.truncate) {
        if (request.texts.empty()) {
          ids.resize(static_cast<std::size_t>(longest));
        } else {
          auto plain = tokenizer_->encode(request.texts[i], /*add_special_tokens=*/false);
          if (!plain) {
            return fail(std::move(handler),
                        Error(plain.error().code(), where + plain.error().what()));
          }
          ids = truncate_keeping_specials(std::move(ids), *plain, longest);
        }
      }
      if (static_cast<int>(ids.size()) > longest) {
        return fail(std::move(handler),
                    Error(ErrorCode::kInvalidArgument, where + std::to_string(ids.size()) +
                                                           " tokens exceed the model's " +
                                                           std::to_string(longest) + " positions"));
      }
      prompt_tokens += static_cast<int>(ids.size());
      job.sequences.push_back(std::move(ids));
    }
    actor_->add(std::move(job), prompt_tokens, std::move(handler));
  });
}

}  // namespace weft::actors
