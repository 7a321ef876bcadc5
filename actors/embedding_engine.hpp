#pragma once
// What an Engine runs for an encoder-only model (BERT family): the model on a thread of its
// own, behind an actor that batches every waiting request's inputs into prefill-only steps
// (model::EmbeddingQueue) and replies with pooled vectors. Tokenization runs on the caller's
// executor, off that thread. docs/embeddings.md.

#include <atomic>
#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <memory>
#include <optional>
#include <thread>

#include "actors/device_backend.hpp"
#include "loaders/model_loader.hpp"
#include "runtime/model/encoder_backend.hpp"
#include "runtime/text/tokenizer.hpp"
#include "weft/engine.hpp"

namespace weft::actors {

class EmbeddingActor;

class EmbeddingEngine {
 public:
  // `loaded` must hold an encoder. Makes its backend on `device` (actors/device_backend.hpp;
  // the CPU with cpu_threads threads, or a GPU) and starts the model's thread. Throws the
  // backend's Error when it cannot be made (no such GPU, out of device memory).
  EmbeddingEngine(const boost::asio::any_io_executor& executor, LoadedModel loaded,
                  std::shared_ptr<const text::Tokenizer> tokenizer, int max_tokens_per_step,
                  unsigned cpu_threads, DeviceChoice device = {});

  // Where the forward passes run, for logs ("cpu (8 threads)", "cuda:0 (bf16)").
  std::string backend_description() const { return backend_->describe(); }
  ~EmbeddingEngine();  // fails what still waits (kShutdown) and joins the thread
  EmbeddingEngine(const EmbeddingEngine&) = delete;
  EmbeddingEngine& operator=(const EmbeddingEngine&) = delete;

  const model::EncoderModel& model() const noexcept { return *loaded_.encoder; }

  void embed(EmbedRequest request,
             boost::asio::any_completion_handler<Engine::EmbedSignature> handler);
  // No new requests; waiting ones fail with kShutdown; completes once the queue is empty.
  void shutdown(boost::asio::any_completion_handler<Engine::DoneSignature> handler);
  void metrics(boost::asio::any_completion_handler<Engine::MetricsSignature> handler);

 private:
  boost::asio::any_io_executor executor_;
  LoadedModel loaded_;
  std::unique_ptr<model::EncoderBackend> backend_;  // used on device_thread_ only
  std::shared_ptr<const text::Tokenizer> tokenizer_;
  boost::asio::io_context device_context_{1};
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::thread device_thread_;
  std::unique_ptr<EmbeddingActor> actor_;
  std::atomic<bool> stopping_{false};
  // Requests being tokenized on the caller's executor: the destructor waits for them, since
  // each ends by handing its job to actor_.
  std::atomic<int> tokenizing_{0};
  std::atomic<std::uint64_t> next_job_id_{1};
};

}  // namespace weft::actors
