// Sequence groups (docs/parallel.md) on a backend that samples on its device, as GPU pipeline
// stages do: a group's collected logits wait in the device's sampler until it samples them,
// and a step submitted in between drops them (CudaModel's enqueue ends the launched step). An
// idle group woken by a new request must therefore not submit between another group's collect
// and its sample (SchedulerActor::run_in_flight). Here the device takes its time in collect()
// right after the new request came, so the woken group's submit reaches it before the sample.

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <optional>
#include <thread>

#include "runtime/model/forward_backend.hpp"
#include "runtime/model/model.hpp"
#include "tests/actors/collect_stream.hpp"
#include "tests/actors/tiny_engine.hpp"
#include "weft/engine.hpp"
#include "weft/runtime.hpp"

namespace weft {
namespace {

namespace asio = boost::asio;

// Two steps in flight; logits "on the device": collect(on_device) leaves a step's rows for
// sample(), and a submit() in between drops them, as a GPU stage does. Each row's token is a
// function of its last token and position. Runs on the executor's thread only.
class TwoGroupDevice final : public model::ForwardBackend {
 public:
  TwoGroupDevice(const model::Model& model, int num_pages, std::function<void()> on_collect)
      : spec_(model.spec()), num_pages_(num_pages), on_collect_(std::move(on_collect)) {}
  const model::ModelSpec& spec() const noexcept override { return spec_; }
  int num_pages() const noexcept override { return num_pages_; }
  bool samples_on_device() const noexcept override { return true; }
  int steps_in_flight() const noexcept override { return 2; }
  Result<void> forward(const model::StepBatch&, std::vector<float>&) override {
    return Error(ErrorCode::kInternal, "two-group device: steps are submitted and collected");
  }
  Result<void> submit(const model::StepBatch& batch) override {
    launched_.reset();  // a step enqueued ends the one whose logits wait in the sampler
    submitted_.push_back(tokens(batch));
    return {};
  }
  Result<void> collect(std::vector<float>& logits, bool on_device) override {
    logits.clear();
    if (submitted_.empty() || !on_device) {
      return Error(ErrorCode::kInternal, "two-group device: nothing to collect on the device");
    }
    launched_ = std::move(submitted_.front());
    submitted_.pop_front();
    if (on_collect_) on_collect_();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return {};
  }
  Result<void> sample(const model::DeviceSamplingInput& in,
                      model::DeviceSamplingOutput& out) override {
    if (!launched_) {
      return Error(ErrorCode::kInternal, "two-group device: no step was launched to sample from");
    }
    out.results.assign(in.rows.size(), {});
    out.candidates.clear();
    out.top.assign(in.rows.size() * sampling::kDeviceTopEntries, {});
    out.host_rows.assign(in.rows.size(), {});
    for (std::size_t k = 0; k < in.rows.size(); ++k) {
      const int row = in.rows[k].row;
      if (row < 0 || static_cast<std::size_t>(row) >= launched_->size()) {
        return Error(ErrorCode::kInternal, "two-group device: a row that was not launched");
      }
      out.results[k].raw_max = 0.0f;
      out.results[k].raw_sum = 1.0;
      out.results[k].token = (*launched_)[static_cast<std::size_t>(row)];
    }
    launched_.reset();
    return {};
  }

 private:
  // Each logit row's next token.
  std::vector<std::int32_t> tokens(const model::StepBatch& batch) const {
    std::vector<std::int32_t> next;
    for (const auto& s : batch.sequences) {
      if (s.token_count == 0) continue;
      const auto at = static_cast<std::size_t>(s.token_begin + s.token_count - 1);
      next.push_back(300 + (batch.tokens[at] * 31 + batch.positions[at]) % 200);
    }
    return next;
  }

  const model::ModelSpec& spec_;
  int num_pages_;
  std::function<void()> on_collect_;
  std::deque<std::vector<std::int32_t>> submitted_;
  std::optional<std::vector<std::int32_t>> launched_;
};

GenerateRequest request(int first_token, int max_tokens) {
  GenerateRequest r;
  r.prompt_ids = {first_token, first_token + 1, first_token + 2};
  r.sampling.temperature = 0.0f;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

TEST(DeviceGroups, AGroupWokenBetweenACollectAndItsSampleWaitsForTheSample) {
  Runtime runtime(RuntimeOptions{.worker_threads = 2});
  std::promise<std::shared_ptr<RequestStream>> second;
  std::atomic<int> collects{0};
  Engine* engine = nullptr;
  EngineConfig config = test_support::tiny_config();
  config.make_backend = [&](const model::Model& model, int pages) {
    // At the first request's second collect (its group running, the other idle) a second
    // request arrives, and the idle group wakes for it while the device is still collecting.
    return std::unique_ptr<model::ForwardBackend>(
        std::make_unique<TwoGroupDevice>(model, pages, [&] {
          if (++collects != 2) return;
          engine->submit(request(400, 4),
                         [&](std::exception_ptr e, std::shared_ptr<RequestStream> s) {
                           if (e) {
                             second.set_exception(e);
                           } else {
                             second.set_value(std::move(s));
                           }
                         });
        }));
  };
  Engine e(runtime.executor(), std::move(config));
  engine = &e;
  auto first = e.submit(request(320, 8), asio::use_future).get();
  const test_support::Collected a = test_support::collect(first);
  const test_support::Collected b = test_support::collect(second.get_future().get());
  EXPECT_EQ(a.error, "");
  EXPECT_EQ(a.reason, FinishReason::kLength);
  EXPECT_EQ(a.ids.size(), 8u);
  EXPECT_EQ(b.error, "");
  EXPECT_EQ(b.reason, FinishReason::kLength);
  EXPECT_EQ(b.ids.size(), 4u);
  const EngineMetrics m = e.metrics(asio::use_future).get();
  EXPECT_EQ(m.finished_error, 0u);
  EXPECT_EQ(m.kv_pages_used, 0);
  EXPECT_EQ(m.steps_in_flight_peak, 2) << "the woken group's step never was in flight";
  e.shutdown(asio::use_future).get();
}

}  // namespace
}  // namespace weft
