// Encoder-decoder models through the Engine on a GPU (device "cuda:0", model::CudaSeq2SeqBackend:
// bf16 weights, cross and self keys and values in the engine's pool of pages), on the
// transformers fixtures of tests/fixtures/seq2seq (t5, t5_gated_untied, mt5, m2m100):
//
//  - one greedy request gives, token for token, what a direct CudaSeq2Seq loop over its own
//    caches gives (the same kernels and products; only where the keys live differs), the CPU
//    engine's greedy tokens and transformers' up to the first near tie (a top-2 margin under
//    twice the bf16 tolerance of cuda_seq2seq_test, 0.03 * max(1, max |logit|));
//  - four requests of different source lengths, one with a forced decoder prefix (a decoder
//    slice of several rows), submitted at once, run together and each gives the tokens it
//    gives alone up to its first near tie;
//  - a cancelled request gives back every page, cross pages included; a pool sized from the
//    device serves requests; int8 KV pages are refused naming kv_cache_dtype, and a decoder
//    longer than the attention's 32768 keys naming max_tokens.
//
// Skips without a GPU. With the build carried elsewhere, WEFT_TEST_SOURCE_DIR names the
// checkout that holds tests/fixtures.

#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <boost/asio/use_future.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "kernels/cuda/device_info.hpp"
#include "loaders/model_loader.hpp"
#include "runtime/model/cuda/cuda_seq2seq.hpp"
#include "runtime/model/seq2seq_session.hpp"
#include "tests/actors/collect_stream.hpp"
#include "weft/engine.hpp"
#include "weft/runtime.hpp"

namespace weft {
namespace {

namespace asio = boost::asio;
using test_support::collect;
using test_support::Collected;

std::filesystem::path fixture(const std::string& name) {
  const char* env = std::getenv("WEFT_TEST_SOURCE_DIR");
  const std::filesystem::path source = env != nullptr && *env != '\0' ? env : WEFT_SOURCE_DIR;
  return source / "tests" / "fixtures" / "seq2seq" / name;
}

struct Reference {
  std::vector<std::int32_t> encoder_ids;
  std::vector<std::int32_t> greedy_ids;
  std::vector<double> greedy_margins;
  double max_logit = 0;
};

Reference read_reference(const std::filesystem::path& dir) {
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.load((dir / "reference.json").string());
  Reference r;
  for (auto v : root["encoder_ids"].get_array())
    r.encoder_ids.push_back(static_cast<std::int32_t>(v.get_int64()));
  for (auto v : root["greedy_ids"].get_array())
    r.greedy_ids.push_back(static_cast<std::int32_t>(v.get_int64()));
  for (auto v : root["greedy_margins"].get_array())
    r.greedy_margins.push_back(v.get_double());
  for (auto row : root["step_logits"].get_array()) {
    for (auto v : row.get_array())
      r.max_logit = std::max(r.max_logit, std::fabs(v.get_double().value()));
  }
  return r;
}

EngineConfig gpu_config(const std::string& name) {
  EngineConfig c;
  c.model_dir = fixture(name).string();
  c.device = "cuda:0";
  c.kv_budget_bytes = 16ll << 20;
  return c;
}

GenerateRequest greedy(std::vector<std::int32_t> source, int max_tokens) {
  GenerateRequest r;
  r.prompt_ids = std::move(source);
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  r.sampling.temperature = 0.0f;
  return r;
}

// Greedy tokens of a direct loop (the start token and the forced prefix fed one at a time,
// then each step's argmax), with each output step's top-2 margin.
struct Greedy {
  std::vector<std::int32_t> ids;
  std::vector<double> margins;
};

Greedy run_direct(model::Seq2SeqRunner& runner, int vocab, std::int32_t start,
                  const GenerateRequest& request) {
  std::vector<std::int32_t> prompt{start};
  prompt.insert(prompt.end(), request.decoder_prefix_ids.begin(), request.decoder_prefix_ids.end());
  const int n = request.sampling.max_tokens;
  Greedy g;
  auto ids = runner.start({request.prompt_ids}, n + static_cast<int>(prompt.size()));
  EXPECT_TRUE(ids) << ids.error().what();
  if (!ids) return g;
  std::vector<float> logits;
  for (std::size_t i = 0; i + 1 < prompt.size(); ++i)
    EXPECT_TRUE(runner.step(*ids, {prompt[i]}, logits));
  std::int32_t next = prompt.back();
  for (int k = 0; k < n; ++k) {
    auto ok = runner.step(*ids, {next}, logits);
    EXPECT_TRUE(ok) << ok.error().what();
    if (!ok || logits.size() != static_cast<std::size_t>(vocab)) break;
    const auto best = std::max_element(logits.begin(), logits.end());
    const float top = *best;
    *best = -INFINITY;
    g.margins.push_back(static_cast<double>(top) - *std::max_element(logits.begin(), logits.end()));
    next = static_cast<std::int32_t>(best - logits.begin());
    g.ids.push_back(next);
  }
  runner.finish(ids->front());
  return g;
}

// Steps before the first whose margin is at most `bound` (where a rounding may flip greedy).
std::size_t before_near_tie(const std::vector<double>& margins, double bound) {
  std::size_t k = 0;
  while (k < margins.size() && margins[k] > bound)
    ++k;
  return k;
}

std::vector<std::int32_t> prefix(const std::vector<std::int32_t>& ids, std::size_t n) {
  return {ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(std::min(n, ids.size()))};
}

class CudaSeq2SeqEngine : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const auto devices = cuda::visible_devices();
    if (devices.devices.empty()) {
      GTEST_SKIP() << "no GPU visible (" << devices.unavailable_reason
                   << "): GPU checks run on the device machine through scripts/gpu-check";
    }
    ASSERT_TRUE(std::filesystem::exists(fixture(GetParam()) / "reference.json"))
        << fixture(GetParam()) << " is missing (set WEFT_TEST_SOURCE_DIR to the checkout)";
    LoadOptions options;
    options.allow_seq2seq = true;
    auto loaded = load_model(fixture(GetParam()), options);
    ASSERT_TRUE(loaded) << loaded.error().what();
    loaded_ = std::move(loaded.value());
    ref_ = read_reference(fixture(GetParam()));
    tolerance_ = 0.03 * std::max(1.0, ref_.max_logit);
    model::CudaSeq2SeqOptions gpu_options;
    auto gpu = model::CudaSeq2Seq::create(*loaded_.seq2seq, gpu_options);
    ASSERT_TRUE(gpu) << gpu.error().what();
    gpu_ = std::move(gpu.value());
  }
  Greedy direct_gpu(const GenerateRequest& r) {
    return run_direct(*gpu_, loaded_.seq2seq->spec().vocab_size,
                      loaded_.seq2seq->decoder_start_token_id(), r);
  }
  Greedy direct_cpu(const GenerateRequest& r) {
    model::CpuSeq2SeqRunner cpu(*loaded_.seq2seq, 16, 256, 2, KvDtype::kF32);
    return run_direct(cpu, loaded_.seq2seq->spec().vocab_size,
                      loaded_.seq2seq->decoder_start_token_id(), r);
  }

  LoadedModel loaded_;
  Reference ref_;
  double tolerance_ = 0;
  std::unique_ptr<model::CudaSeq2Seq> gpu_;
};

TEST_P(CudaSeq2SeqEngine, GreedyEqualsTheDirectGpuLoopTheCpuAndTransformers) {
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
  Engine engine(runtime.executor(), gpu_config(GetParam()));
  ASSERT_TRUE(engine.encoder_decoder());
  const int n = static_cast<int>(ref_.greedy_ids.size());
  const GenerateRequest request = greedy(ref_.encoder_ids, n);
  const Collected got = collect(engine.submit(request, asio::use_future).get());
  ASSERT_EQ(got.reason, FinishReason::kLength) << got.error;
  ASSERT_EQ(got.ids.size(), static_cast<std::size_t>(n));
  EXPECT_EQ(got.usage.prompt_tokens, static_cast<int>(ref_.encoder_ids.size()));
  // The same products and kernels as the direct loop: equal all the way.
  EXPECT_EQ(got.ids, direct_gpu(request).ids) << GetParam();
  const Greedy cpu = direct_cpu(request);
  const std::size_t cpu_same = before_near_tie(cpu.margins, 2 * tolerance_);
  EXPECT_EQ(prefix(got.ids, cpu_same), prefix(cpu.ids, cpu_same))
      << GetParam() << ": the CPU's greedy tokens before its first near tie";
  const std::size_t hf_same = before_near_tie(ref_.greedy_margins, 2 * tolerance_);
  EXPECT_EQ(prefix(got.ids, hf_same), prefix(ref_.greedy_ids, hf_same))
      << GetParam() << ": transformers' greedy tokens before the first near tie";
  std::cout << "[ measured ] " << GetParam() << ": " << n << " greedy tokens equal the direct GPU "
            << "loop; compared with the CPU for " << cpu_same << ", transformers for " << hf_same
            << " (before the first near tie)\n";
  const EngineMetrics m = engine.metrics(asio::use_future).get();
  EXPECT_EQ(m.kv_pages_used, 0);
  EXPECT_EQ(m.kv_cache_dtype, "bf16");
}

TEST_P(CudaSeq2SeqEngine, RequestsOfDifferentLengthsRunTogether) {
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
  Engine engine(runtime.executor(), gpu_config(GetParam()));
  // Sources of 3 tokens to all of them (1 to 3 pages of 16), output lengths 8 to 17; the last
  // forces two decoder tokens (its first step runs three decoder rows, one of them sampled).
  const auto& ids = ref_.encoder_ids;
  const std::size_t lengths[] = {ids.size(), ids.size() * 2 / 3, ids.size() / 3, 3};
  std::vector<GenerateRequest> requests;
  for (std::size_t i = 0; i < 4; ++i) {
    requests.push_back(greedy(
        std::vector<std::int32_t>(ids.end() - static_cast<std::ptrdiff_t>(lengths[i]), ids.end()),
        8 + 3 * static_cast<int>(i)));
  }
  requests[3].decoder_prefix_ids = {ref_.greedy_ids[0], ref_.greedy_ids[1]};
  std::vector<Greedy> alone;
  for (const auto& r : requests)
    alone.push_back(direct_gpu(r));
  const EngineMetrics before = engine.metrics(asio::use_future).get();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& r : requests)
    streams.push_back(engine.submit(r, asio::use_future).get());
  int output_tokens = 0;
  for (std::size_t i = 0; i < streams.size(); ++i) {
    const Collected got = collect(streams[i]);
    ASSERT_EQ(got.reason, FinishReason::kLength) << got.error;
    ASSERT_EQ(got.ids.size(), static_cast<std::size_t>(requests[i].sampling.max_tokens));
    // Batched rows differ from single ones by cuBLAS's order of sums only (far under the bf16
    // tolerance against the CPU), so greedy agrees until a margin under twice that.
    const std::size_t same = before_near_tie(alone[i].margins, 2 * tolerance_);
    EXPECT_EQ(prefix(got.ids, same), prefix(alone[i].ids, same))
        << GetParam() << ": request " << i << " (" << lengths[i] << " source tokens)";
    std::cout << "[ measured ] " << GetParam() << ": request " << i << " batched, equal to its "
              << "direct loop for " << same << " of " << got.ids.size() << " tokens compared"
              << (prefix(got.ids, got.ids.size()) == alone[i].ids ? " (all equal)" : "") << "\n";
    output_tokens += static_cast<int>(got.ids.size());
  }
  const EngineMetrics after = engine.metrics(asio::use_future).get();
  // One after another they take a step a token (50); together about the longest one's 17
  // and a few for the submits' spacing.
  EXPECT_LT(after.steps - before.steps, static_cast<std::uint64_t>(output_tokens) * 3 / 4)
      << "the requests did not run together";
  EXPECT_EQ(after.kv_pages_used, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaSeq2SeqEngine,
                         ::testing::Values("t5", "t5_gated_untied", "mt5", "m2m100"),
                         [](const auto& p) { return p.param; });

#define SKIP_WITHOUT_GPU()                                                                 \
  do {                                                                                     \
    const auto devices = cuda::visible_devices();                                          \
    if (devices.devices.empty()) {                                                         \
      GTEST_SKIP() << "no GPU visible (" << devices.unavailable_reason                     \
                   << "): GPU checks run on the device machine through scripts/gpu-check"; \
    }                                                                                      \
  } while (0)

TEST(CudaSeq2SeqEngineLifecycle, CancelMidGenerationReturnsEveryPage) {
  SKIP_WITHOUT_GPU();
  const Reference ref = read_reference(fixture("t5"));
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
  Engine engine(runtime.executor(), gpu_config("t5"));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 4; ++i)
    streams.push_back(engine.submit(greedy(ref.encoder_ids, 400), asio::use_future).get());
  for (auto& s : streams) {
    for (int k = 0; k < 3; ++k) {
      Event e = s->next(asio::use_future).get();
      ASSERT_EQ(e.kind, Event::Kind::kDelta) << e.error;
    }
  }
  EXPECT_GT(engine.metrics(asio::use_future).get().kv_pages_used, 0);
  for (auto& s : streams)
    engine.cancel(s->id());
  for (auto& s : streams)
    EXPECT_EQ(collect(s).reason, FinishReason::kCancelled);
  const EngineMetrics after = engine.metrics(asio::use_future).get();
  EXPECT_EQ(after.kv_pages_used, 0);
  EXPECT_EQ(after.finished_cancelled, 4u);
  EXPECT_EQ(collect(engine.submit(greedy(ref.encoder_ids, 5), asio::use_future).get()).reason,
            FinishReason::kLength);
}

TEST(CudaSeq2SeqEngineLifecycle, PoolFromTheDeviceAndRefusals) {
  SKIP_WITHOUT_GPU();
  const Reference ref = read_reference(fixture("m2m100"));
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
  {
    EngineConfig c = gpu_config("m2m100");
    c.gpu_memory_fraction = 0.3;  // the pool takes what 30% of the device leaves
    Engine engine(runtime.executor(), c);
    const EngineMetrics m = engine.metrics(asio::use_future).get();
    EXPECT_GT(m.kv_pages_total, 1000);
    const Collected got =
        collect(engine.submit(greedy(ref.encoder_ids, 6), asio::use_future).get());
    EXPECT_EQ(got.reason, FinishReason::kLength) << got.error;
    EXPECT_EQ(engine.metrics(asio::use_future).get().kv_pages_used, 0);
  }
  {
    // Past the CUDA attention's 32768 keys: refused at submit, naming the field.
    Engine engine(runtime.executor(), gpu_config("m2m100"));
    try {
      engine.submit(greedy(ref.encoder_ids, 40000), asio::use_future).get();
      ADD_FAILURE() << "max_tokens 40000 was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("max_tokens: 40000"), std::string::npos) << e.what();
    }
  }
  EngineConfig int8 = gpu_config("m2m100");
  int8.kv_cache_dtype = "int8";
  try {
    Engine engine(runtime.executor(), int8);
    ADD_FAILURE() << "int8 KV pages were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("kv_cache_dtype int8"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace weft
