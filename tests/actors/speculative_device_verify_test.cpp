// Greedy verification from the device's picks (docs/speculative.md#the-draft-on-the-gpu): on a
// backend that samples on its device, a greedy draft slice's rows are drawn greedily there
// beside the plain rows and the tree is walked by those picks, so no logits row comes to the
// host. Here the "device" is the CPU model behind a backend that samples greedily on the host
// from its own copy of the logits (HostSamplingBackend), so the engine's device path runs on a
// machine without a GPU: the output with prompt lookup and with weft-tiny-draft (chains and
// trees, several sequences at once) is the plain greedy output on the same backend, token and
// logprob for token, no logits row was handed to the host, and pages all return.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/use_future.hpp>
#include <cmath>
#include <filesystem>
#include <memory>

#include "runtime/model/forward_backend.hpp"
#include "tests/actors/collect_stream.hpp"
#include "tests/actors/tiny_engine.hpp"
#include "weft/engine.hpp"
#include "weft/runtime.hpp"

namespace weft {
namespace {

namespace asio = boost::asio;
using test_support::collect;
using test_support::Collected;

struct DeviceCounts {
  std::atomic<int> launches{0}, host_forwards{0}, sampled_rows{0};
};

// The CPU model, sampling greedily "on the device" (kGreedy rows only: argmax after the bias
// edits, lowest id on ties; raw maximum, normaliser and top entries for the logprobs).
class HostSamplingBackend final : public model::ForwardBackend {
 public:
  HostSamplingBackend(const model::Model& m, int pages, std::shared_ptr<DeviceCounts> counts)
      : cpu_(m, m.kv_layout(16), pages, 2), counts_(std::move(counts)) {}
  const model::ModelSpec& spec() const noexcept override { return cpu_.spec(); }
  int num_pages() const noexcept override { return cpu_.num_pages(); }
  bool supports_token_trees() const noexcept override { return cpu_.supports_token_trees(); }
  Result<void> forward(const model::StepBatch& batch, std::vector<float>& logits) override {
    ++counts_->host_forwards;
    return cpu_.forward(batch, logits);
  }
  bool samples_on_device() const noexcept override { return true; }
  Result<void> launch(const model::StepBatch& batch) override {
    ++counts_->launches;
    rows_ = batch.logit_rows();
    return cpu_.forward(batch, logits_);
  }
  Result<void> sample(const model::DeviceSamplingInput& in,
                      model::DeviceSamplingOutput& out) override {
    const int V = spec().vocab_size;
    out.results.assign(in.rows.size(), {});
    out.top.assign(in.rows.size() * sampling::kDeviceTopEntries, {});
    out.host_rows.assign(in.rows.size(), {});
    out.candidates.clear();
    for (std::size_t k = 0; k < in.rows.size(); ++k) {
      const auto& r = in.rows[k];
      if (r.mode != sampling::DeviceSampleMode::kGreedy || r.row < 0 || r.row >= rows_ ||
          r.mask_word_offset >= 0) {
        return Error(ErrorCode::kInternal, "HostSamplingBackend samples greedy rows only");
      }
      ++counts_->sampled_rows;
      const float* raw = logits_.data() + static_cast<std::size_t>(r.row) * V;
      std::vector<float> x(raw, raw + V);
      for (int e = r.edit_begin; e < r.edit_begin + r.edit_count; ++e)
        x[static_cast<std::size_t>(in.edits[static_cast<std::size_t>(e)].id)] +=
            in.edits[static_cast<std::size_t>(e)].bias;
      auto& res = out.results[k];
      res.token = static_cast<std::int32_t>(std::max_element(x.begin(), x.end()) - x.begin());
      res.raw_max = *std::max_element(raw, raw + V);
      res.raw_sum = 0;
      for (int i = 0; i < V; ++i)
        res.raw_sum += std::exp(static_cast<double>(raw[i]) - res.raw_max);
      res.chosen_raw = raw[res.token];
      res.offset = -1;
      const int n = std::min(r.logprobs, sampling::kDeviceTopEntries);
      std::vector<std::int32_t> ids(static_cast<std::size_t>(V));
      for (int i = 0; i < V; ++i)
        ids[static_cast<std::size_t>(i)] = i;
      std::partial_sort(ids.begin(), ids.begin() + n, ids.end(),
                        [&](auto a, auto b) { return raw[a] != raw[b] ? raw[a] > raw[b] : a < b; });
      res.top = n;
      for (int i = 0; i < n; ++i) {
        const auto id = ids[static_cast<std::size_t>(i)];
        out.top[k * sampling::kDeviceTopEntries + static_cast<std::size_t>(i)] = {id, 0.0f,
                                                                                  raw[id]};
      }
    }
    return {};
  }

 private:
  model::CpuForwardBackend cpu_;
  std::shared_ptr<DeviceCounts> counts_;
  std::vector<float> logits_;
  int rows_ = 0;
};

const char* kPrompts[] = {
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. "
    "The quick brown fox",
    "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money "
    "in my purse, I thought I would sail about. Call me Ishmael. Some years ago",
    "Fellow-Citizens of the Senate and House of Representatives: Fellow-Citizens of the Senate"};

struct EngineRun {
  std::vector<Collected> outputs;
  EngineMetrics metrics;
};

EngineRun run(const std::string& speculate, const std::string& draft, int tokens, int width,
              std::shared_ptr<DeviceCounts> counts) {
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
  EngineConfig c = test_support::tiny_config();
  c.prefix_cache = false;
  c.page_size = 16;
  c.speculate = speculate;
  c.draft_model_dir = draft;
  c.spec_tokens = tokens;
  c.spec_width = width;
  c.make_backend = [counts](const model::Model& m, int pages) {
    return std::make_unique<HostSamplingBackend>(m, pages, counts);
  };
  Engine engine(runtime.executor(), c);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const char* p : kPrompts) {
    GenerateRequest g;
    g.prompt = p;
    g.sampling.temperature = 0;
    g.sampling.max_tokens = 40;
    g.sampling.ignore_eos = true;
    g.sampling.logprobs = 2;
    streams.push_back(engine.submit(std::move(g), asio::use_future).get());
  }
  EngineRun r;
  for (auto& s : streams)
    r.outputs.push_back(collect(s));
  r.metrics = engine.metrics(asio::use_future).get();
  engine.shutdown(asio::use_future).get();
  return r;
}

void expect_plain(const EngineRun& plain, const EngineRun& spec, const std::string& what) {
  ASSERT_EQ(spec.outputs.size(), plain.outputs.size());
  for (std::size_t i = 0; i < plain.outputs.size(); ++i) {
    EXPECT_EQ(spec.outputs[i].reason, FinishReason::kLength)
        << what << ": " << spec.outputs[i].error;
    EXPECT_EQ(spec.outputs[i].ids, plain.outputs[i].ids) << what << ": prompt " << i;
    ASSERT_EQ(spec.outputs[i].logprobs.size(), plain.outputs[i].logprobs.size());
    for (std::size_t t = 0; t < plain.outputs[i].logprobs.size(); ++t) {
      EXPECT_FLOAT_EQ(spec.outputs[i].logprobs[t].logprob, plain.outputs[i].logprobs[t].logprob)
          << what << ": prompt " << i << " token " << t;
      ASSERT_EQ(spec.outputs[i].logprobs[t].top.size(), 2u);
      EXPECT_EQ(spec.outputs[i].logprobs[t].top[0].id, plain.outputs[i].logprobs[t].top[0].id);
    }
  }
  EXPECT_GT(spec.metrics.speculative_verifications, 0u) << what << ": never speculated";
  EXPECT_GT(spec.metrics.speculative_accepted_tokens, 0u) << what << ": nothing accepted";
  EXPECT_EQ(spec.metrics.kv_pages_used, 0) << what << ": pages not given back";
}

TEST(SpeculativeDeviceVerify, GreedyDraftsAreVerifiedFromTheDevicesPicks) {
  auto plain_counts = std::make_shared<DeviceCounts>();
  const EngineRun plain = run("", "", 4, 1, plain_counts);
  for (const auto& o : plain.outputs)
    ASSERT_EQ(o.reason, FinishReason::kLength) << o.error;
  EXPECT_EQ(plain_counts->host_forwards.load(), 0);

  const std::string draft = std::string(WEFT_SOURCE_DIR) + "/models/weft-tiny-draft";
  const std::string tiny = std::string(WEFT_SOURCE_DIR) + "/models/weft-tiny";
  struct Case {
    std::string speculate, draft;
    int tokens, width;
  };
  std::vector<Case> cases = {{"prompt-lookup", "", 4, 1},
                             {"prompt-lookup", "", 3, 2},
                             {"draft", tiny, 4, 1},
                             {"draft", tiny, 3, 2}};
  if (std::filesystem::exists(draft + "/model.safetensors")) {
    cases.push_back({"draft", draft, 4, 1});
    cases.push_back({"draft", draft, 4, 2});
  }
  for (const Case& c : cases) {
    const std::string what = c.speculate + " " + c.draft + " depth " + std::to_string(c.tokens) +
                             " width " + std::to_string(c.width);
    auto counts = std::make_shared<DeviceCounts>();
    const EngineRun spec = run(c.speculate, c.draft, c.tokens, c.width, counts);
    expect_plain(plain, spec, what);
    // Every step, verification steps included, launched and sampled on the "device": no
    // logits row came to the host.
    EXPECT_EQ(counts->host_forwards.load(), 0) << what;
    EXPECT_GT(counts->launches.load(), 0) << what;
    EXPECT_LT(spec.metrics.steps, plain.metrics.steps) << what << ": no step saved";
  }
}

}  // namespace
}  // namespace weft
