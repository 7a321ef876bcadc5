// Issue #17's batched-tree divergence on the GPU, reproduced on the CPU. After a verification
// accepts tokens off the draft's first chain, the sequence's next step computes them and the
// bonus token as a short chunk (docs/speculative.md, "Commit"), on its own or before the next
// tree in the same slice. The GPU computes a chunk run as a prefill tile with other rounding
// than a decode row, so that chunk's logits (and KV) were not the bits plain decoding gives
// those positions, and greedy output left plain greedy output at the first near-tie. The chunk
// must run as decode rows (SequenceSlice::verify).
//
// TileRoundingBackend is the CPU model with the GPU's distinction made visible: a row computed
// as a prefill tile (a multi-token slice that is neither verification nor decode rows) gets its
// two largest logits swapped, which changes its greedy pick. Prompts are prefilled the same in
// plain and speculative runs, so only a catch-up chunk computed as a tile can make the outputs
// differ. weft-tiny with weft-tiny-draft as a tree (3 deep, width 2) and three sequences at
// once, as the failing GPU test; and the trace's diagnosis of a divergence, checked on a
// divergence made on purpose.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/use_future.hpp>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "runtime/model/forward_backend.hpp"
#include "tests/actors/collect_stream.hpp"
#include "tests/actors/speculation_trace_diagnosis.hpp"
#include "tests/actors/tiny_engine.hpp"
#include "weft/engine.hpp"
#include "weft/runtime.hpp"

namespace weft {
namespace {

namespace asio = boost::asio;
using test_support::collect;
using test_support::Collected;

struct TileCounts {
  // Multi-token slices after a sequence's prompt (prefix caching is off: a prompt starts at 0)
  // without every row's logits: catch-up chunks; and those computed as prefill tiles.
  std::atomic<int> catch_ups{0}, catch_ups_as_tiles{0};
};

void swap_top_two(float* row, int vocab) {
  float* first = std::max_element(row, row + vocab);
  const float top = *first;
  *first = -1e30f;
  float* second = std::max_element(row, row + vocab);
  *first = *second;
  *second = top;
}

class TileRoundingBackend final : public model::ForwardBackend {
 public:
  // corrupt: the first step that verifies drafts gets its verification rows' top two swapped
  // too (a divergence made on purpose, for the diagnosis).
  TileRoundingBackend(const model::Model& m, int pages, std::shared_ptr<TileCounts> counts,
                      bool corrupt)
      : cpu_(m, m.kv_layout(16), pages, 2), counts_(std::move(counts)), corrupt_(corrupt) {}
  const model::ModelSpec& spec() const noexcept override { return cpu_.spec(); }
  int num_pages() const noexcept override { return cpu_.num_pages(); }
  bool supports_token_trees() const noexcept override { return cpu_.supports_token_trees(); }
  Result<void> forward(const model::StepBatch& batch, std::vector<float>& logits) override {
    const bool corrupt_step =
        corrupt_ && std::any_of(batch.sequences.begin(), batch.sequences.end(),
                                [](const auto& s) { return s.verify && s.all_logits; });
    if (corrupt_step) corrupt_ = false;
    if (auto r = cpu_.forward(batch, logits); !r) return r;
    const int V = spec().vocab_size;
    int row = 0;
    for (const auto& s : batch.sequences) {
      const int rows = s.all_logits ? s.token_count : (s.token_count > 0);
      const bool tile = s.token_count > 1 && !s.verify && s.tree_parent.empty();
      if (s.token_count > 1 && !s.all_logits &&
          batch.positions[static_cast<std::size_t>(s.token_begin)] > 0) {
        ++counts_->catch_ups;
        counts_->catch_ups_as_tiles += tile;
      }
      const bool corrupt = corrupt_step && s.verify && s.all_logits;
      if (tile || corrupt) {
        for (int r = row; r < row + rows; ++r)
          swap_top_two(logits.data() + static_cast<std::size_t>(r) * V, V);
      }
      row += rows;
    }
    return {};
  }

 private:
  model::CpuForwardBackend cpu_;
  std::shared_ptr<TileCounts> counts_;
  bool corrupt_;
};

const char* kPrompts[] = {
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. "
    "The quick brown fox",
    "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money "
    "in my purse, I thought I would sail about. Call me Ishmael. Some years ago",
    "Fellow-Citizens of the Senate and House of Representatives: Fellow-Citizens of the Senate"};

std::string draft_dir() {
  return std::string(WEFT_SOURCE_DIR) + "/models/weft-tiny-draft";
}

struct EngineRun {
  std::vector<Collected> outputs;
  EngineMetrics metrics;
  std::vector<test_support::TraceLine> trace;
};

EngineRun run(const std::string& speculate, std::shared_ptr<TileCounts> counts,
              bool corrupt = false) {
  // Every engine of the process reads WEFT_SPEC_TRACE when it starts.
  const std::string trace = (std::filesystem::temp_directory_path() /
                             ("weft-catch-up-trace-" + std::to_string(::getpid()) + ".jsonl"))
                                .string();
  std::filesystem::remove(trace);
  ::setenv("WEFT_SPEC_TRACE", trace.c_str(), 1);
  EngineRun r;
  {
    Runtime runtime{RuntimeOptions{.worker_threads = 2}};
    EngineConfig c = test_support::tiny_config();
    c.prefix_cache = false;
    c.page_size = 16;
    c.speculate = speculate;
    if (speculate == "draft") c.draft_model_dir = draft_dir();
    c.spec_tokens = 3;
    c.spec_width = 2;
    c.make_backend = [counts, corrupt](const model::Model& m, int pages) {
      return std::make_unique<TileRoundingBackend>(m, pages, counts, corrupt);
    };
    Engine engine(runtime.executor(), c);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const char* p : kPrompts) {
      GenerateRequest g;
      g.prompt = p;
      g.sampling.temperature = 0;
      g.sampling.max_tokens = 40;
      g.sampling.ignore_eos = true;
      streams.push_back(engine.submit(std::move(g), asio::use_future).get());
    }
    for (auto& s : streams)
      r.outputs.push_back(collect(s));
    r.metrics = engine.metrics(asio::use_future).get();
    engine.shutdown(asio::use_future).get();
  }
  ::unsetenv("WEFT_SPEC_TRACE");
  r.trace = test_support::read_speculation_trace(trace);
  std::filesystem::remove(trace);
  return r;
}

TEST(SpeculativeCatchUp, ChunksAfterOffChainAcceptanceRunAsDecodeRows) {
  if (!std::filesystem::exists(draft_dir() + "/model.safetensors")) {
    GTEST_SKIP() << draft_dir() << " has no weights";
  }
  auto plain_counts = std::make_shared<TileCounts>();
  const EngineRun plain = run("", plain_counts);
  EXPECT_EQ(plain_counts->catch_ups.load(), 0);
  // weft-tiny-draft proposes a tree at every step, so a catch-up shares its slice with the next
  // tree; prompt lookup proposes nothing where no n-gram matches, so there catch-ups also run
  // on their own.
  int with_tree = 0, alone = 0;
  for (const char* speculate : {"draft", "prompt-lookup"}) {
    auto counts = std::make_shared<TileCounts>();
    const EngineRun spec = run(speculate, counts);
    EXPECT_EQ(counts->catch_ups_as_tiles.load(), 0)
        << speculate << ": a catch-up chunk ran as a prefill tile";
    ASSERT_EQ(spec.outputs.size(), plain.outputs.size());
    for (std::size_t i = 0; i < plain.outputs.size(); ++i) {
      ASSERT_EQ(plain.outputs[i].reason, FinishReason::kLength) << plain.outputs[i].error;
      EXPECT_EQ(spec.outputs[i].ids, plain.outputs[i].ids)
          << speculate << ": "
          << test_support::explain_first_difference(spec.trace, i,
                                                    spec.outputs[i].usage.prompt_tokens,
                                                    plain.outputs[i].ids, spec.outputs[i].ids);
    }
    EXPECT_GT(spec.metrics.speculative_accepted_tokens, 0u) << speculate;
    EXPECT_EQ(spec.metrics.kv_pages_used, 0) << speculate;
    std::uint64_t verifications = 0;
    int own = 0;
    for (const auto& e : spec.trace) {
      verifications += e.kind == "verify";
      with_tree += e.kind == "verify" && e.catch_up > 0;
      own += e.kind == "decode_rows";
    }
    EXPECT_EQ(verifications, spec.metrics.speculative_verifications) << speculate;
    EXPECT_EQ(own, counts->catch_ups.load()) << speculate << ": every catch-up chunk is traced";
    alone += own;
  }
  EXPECT_GT(with_tree, 0) << "no catch-up verified with its next tree";
  EXPECT_GT(alone, 0) << "no catch-up on its own";
}

// A verification step whose rows are wrong on purpose: the diagnosis names the first differing
// token, the step that appended it and its tree and accepted path.
TEST(SpeculativeCatchUp, TheTraceDiagnosisPinpointsADivergence) {
  auto plain_counts = std::make_shared<TileCounts>();
  const EngineRun plain = run("", plain_counts);
  // Prompt lookup; the first step that verifies drafts has its rows wrong.
  const EngineRun spec = run("prompt-lookup", std::make_shared<TileCounts>(), true);
  ASSERT_FALSE(spec.trace.empty()) << "prompt lookup verified no draft";
  const std::uint64_t corrupt = spec.trace.front().step;
  bool diverged = false;
  for (std::size_t i = 0; i < plain.outputs.size(); ++i) {
    const std::string why =
        test_support::explain_first_difference(spec.trace, i, spec.outputs[i].usage.prompt_tokens,
                                               plain.outputs[i].ids, spec.outputs[i].ids);
    if (spec.outputs[i].ids == plain.outputs[i].ids) {
      EXPECT_TRUE(why.empty());
      continue;
    }
    diverged = true;
    EXPECT_NE(why.find("request " + std::to_string(i)), std::string::npos) << why;
    EXPECT_NE(why.find("Appended at step " + std::to_string(corrupt)), std::string::npos) << why;
    EXPECT_NE(why.find("-> step " + std::to_string(corrupt)), std::string::npos) << why;
    EXPECT_NE(why.find("accepted path"), std::string::npos) << why;
  }
  EXPECT_TRUE(diverged) << "step " << corrupt << "'s wrong rows changed no output";
}

}  // namespace
}  // namespace weft
