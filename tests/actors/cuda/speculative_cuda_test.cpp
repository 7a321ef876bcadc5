// Speculative decoding on the GPU end to end (docs/speculative.md#exact-on-the-gpu): on
// weft-tiny ("cuda:0"), greedy output with prompt lookup (a chain, and a tree of width 2) and
// with weft-tiny drafting for itself is plain greedy output token for token; requests run one
// at a time, so that each step holds only the request's own rows. Skips without a GPU.

#include <gtest/gtest.h>

#include <boost/asio/use_future.hpp>
#include <cstdlib>
#include <filesystem>

#include "kernels/cuda/device_info.hpp"
#include "tests/actors/collect_stream.hpp"
#include "weft/engine.hpp"
#include "weft/runtime.hpp"

namespace weft {
namespace {

namespace asio = boost::asio;
using test_support::collect;
using test_support::Collected;

#define SKIP_WITHOUT_GPU()                                                                 \
  do {                                                                                     \
    const auto devices = cuda::visible_devices();                                          \
    if (devices.devices.empty()) {                                                         \
      GTEST_SKIP() << "no GPU visible (" << devices.unavailable_reason                     \
                   << "): GPU checks run on the device machine through scripts/gpu-check"; \
    }                                                                                      \
  } while (0)

std::string tiny_dir() {
  const char* env = std::getenv("WEFT_TEST_SOURCE_DIR");
  const std::filesystem::path source = env != nullptr && *env != '\0' ? env : WEFT_SOURCE_DIR;
  return (source / "models/weft-tiny").string();
}

const char* kPrompts[] = {
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. "
    "The quick brown fox",
    "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money "
    "in my purse, I thought I would sail about. Call me Ishmael. Some years ago",
    "Fellow-Citizens of the Senate and House of Representatives: Fellow-Citizens of the Senate"};

struct SpecRun {
  std::vector<Collected> outputs;
  EngineMetrics metrics;
};

SpecRun run(const std::string& speculate, int tokens, int width) {
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
  EngineConfig c;
  c.model_dir = tiny_dir();
  c.device = "cuda:0";
  c.kv_budget_bytes = 64ll << 20;
  c.prefix_cache = false;
  c.speculate = speculate;
  if (speculate == "draft") c.draft_model_dir = c.model_dir;
  c.spec_tokens = tokens;
  c.spec_width = width;
  Engine engine(runtime.executor(), c);
  SpecRun r;
  for (const char* p : kPrompts) {
    GenerateRequest g;
    g.prompt = p;
    g.sampling.temperature = 0;
    g.sampling.max_tokens = 48;
    g.sampling.ignore_eos = true;
    r.outputs.push_back(collect(engine.submit(std::move(g), asio::use_future).get()));
  }
  r.metrics = engine.metrics(asio::use_future).get();
  engine.shutdown(asio::use_future).get();
  return r;
}

void expect_plain(const SpecRun& plain, const SpecRun& spec, const std::string& what) {
  ASSERT_EQ(spec.outputs.size(), plain.outputs.size());
  for (std::size_t i = 0; i < plain.outputs.size(); ++i) {
    EXPECT_EQ(spec.outputs[i].reason, FinishReason::kLength)
        << what << ": " << spec.outputs[i].error;
    EXPECT_EQ(spec.outputs[i].ids, plain.outputs[i].ids)
        << what << ": prompt " << i << " differs from plain greedy decoding";
  }
  EXPECT_GT(spec.metrics.speculative_verifications, 0u) << what << ": never speculated";
  EXPECT_EQ(spec.metrics.kv_pages_used, 0) << what << ": pages not given back";
}

TEST(CudaSpeculative, GreedyOutputIsPlainGreedyOutput) {
  SKIP_WITHOUT_GPU();
  const SpecRun plain = run("", 4, 1);
  for (const auto& o : plain.outputs)
    ASSERT_EQ(o.reason, FinishReason::kLength) << o.error;
  const SpecRun chain = run("prompt-lookup", 4, 1);
  expect_plain(plain, chain, "prompt lookup chain");
  EXPECT_GT(chain.metrics.speculative_accepted_tokens, 0u);
  EXPECT_LT(chain.metrics.steps, plain.metrics.steps) << "speculation saved no step";
  expect_plain(plain, run("prompt-lookup", 3, 2), "prompt lookup tree");
  const SpecRun self = run("draft", 4, 1);
  expect_plain(plain, self, "self draft");
  // The draft is weft-tiny on the CPU (fp32), the target on the GPU (bf16): they agree but at
  // near-ties.
  EXPECT_GE(self.metrics.speculative_accepted_tokens * 10,
            self.metrics.speculative_draft_tokens * 8);
  expect_plain(plain, run("draft", 3, 3), "self draft tree");
}

}  // namespace
}  // namespace weft
