// Encoder-decoder models through the Engine (docs/seq2seq.md, "In the engine"), on the
// transformers fixtures of tests/fixtures/seq2seq (t5, t5_gated_untied, mt5, m2m100): the
// engine's tokens equal a direct Seq2SeqSession loop's (the path `weft generate` took before the
// engine ran these models) token for token, greedy and sampled, and transformers' greedy
// tokens up to the first near tie; requests batched together give the tokens each gives
// alone; a cancelled request gives back every page (cross-attention pages included).

#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <filesystem>
#include <future>
#include <span>
#include <thread>

#include "actors/engine_seq2seq.hpp"
#include "loaders/model_loader.hpp"
#include "runtime/model/seq2seq_session.hpp"
#include "runtime/sampling/sequence_sampler.hpp"
#include "tests/actors/collect_stream.hpp"
#include "weft/engine.hpp"

namespace weft {
namespace {

namespace asio = boost::asio;
using test_support::collect;
using test_support::Collected;

std::filesystem::path fixture(const std::string& name) {
  return std::filesystem::path(WEFT_SOURCE_DIR) / "tests" / "fixtures" / "seq2seq" / name;
}

struct Reference {
  std::vector<std::int32_t> encoder_ids;
  std::vector<std::int32_t> greedy_ids;
  std::vector<double> greedy_margins;
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
  return r;
}

// The engine with its own io threads, as an embedding program runs it.
class RunningEngine {
 public:
  explicit RunningEngine(EngineConfig config)
      : work_(asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {
    try {
      engine_.emplace(io_.get_executor(), std::move(config));
    } catch (...) {
      stop();
      throw;
    }
  }
  ~RunningEngine() {
    if (engine_) engine_->shutdown(asio::use_future).get();
    engine_.reset();
    stop();
  }
  Engine& operator*() { return *engine_; }
  Engine* operator->() { return &*engine_; }

 private:
  void stop() {
    work_.reset();
    if (thread_.joinable()) thread_.join();
  }
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
  std::optional<Engine> engine_;
};

EngineConfig config_for(const std::string& name, std::int64_t kv_bytes = 8ll << 20) {
  EngineConfig c;
  c.model_dir = fixture(name).string();
  c.kv_budget_bytes = kv_bytes;
  c.cpu_threads = 2;
  return c;
}

GenerateRequest request_of(const std::vector<std::int32_t>& source, int max_tokens,
                           bool ignore_eos = true) {
  GenerateRequest r;
  r.prompt_ids = source;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = ignore_eos;
  r.sampling.temperature = 0.0f;
  return r;
}

Collected run_one(Engine& engine, GenerateRequest request) {
  auto stream = engine.submit(std::move(request), asio::use_future).get();
  return collect(stream);
}

// What `weft generate` did before the engine ran encoder-decoder models: a Seq2SeqSession,
// the start token and forced prefix fed one at a time, then the engine's sampler on each row.
std::vector<std::int32_t> direct_tokens(const model::Seq2SeqModel& model,
                                        const std::vector<int>& eos,
                                        const std::vector<std::int32_t>& source,
                                        const GenerateRequest& request, std::uint64_t seed) {
  const int max_tokens = request.sampling.max_tokens;
  std::vector<std::int32_t> prompt{model.decoder_start_token_id()};
  prompt.insert(prompt.end(), request.decoder_prefix_ids.begin(), request.decoder_prefix_ids.end());
  model::Seq2SeqSession session(model, 16, 256, 2);
  auto ids = session.start({source}, max_tokens + static_cast<int>(prompt.size()));
  EXPECT_TRUE(ids) << ids.error().what();
  if (!ids) return {};
  std::vector<float> logits;
  for (std::size_t i = 0; i + 1 < prompt.size(); ++i)
    EXPECT_TRUE(session.step(*ids, {prompt[i]}, logits));
  sampling::SequenceSampler sampler(request.sampling, prompt, seed);
  std::vector<std::int32_t> out;
  std::int32_t next = prompt.back();
  const auto vocab = static_cast<std::size_t>(model.spec().vocab_size);
  while (static_cast<int>(out.size()) < max_tokens) {
    EXPECT_TRUE(session.step(*ids, {next}, logits));
    auto sampled = sampler.try_sample(std::span<float>(logits.data(), vocab));
    EXPECT_TRUE(sampled) << sampled.error().what();
    if (!sampled) break;
    out.push_back(sampled->id);
    next = sampled->id;
    if (!request.sampling.ignore_eos && std::find(eos.begin(), eos.end(), next) != eos.end()) {
      break;
    }
  }
  session.finish(ids->front());
  return out;
}

LoadedModel load(const std::string& name) {
  LoadOptions options;
  options.allow_seq2seq = true;
  auto loaded = load_model(fixture(name), options);
  EXPECT_TRUE(loaded) << loaded.error().what();
  return std::move(loaded.value());
}

class Seq2SeqEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(Seq2SeqEngine, GreedyEqualsTheSessionAndTransformers) {
  const Reference ref = read_reference(fixture(GetParam()));
  const LoadedModel loaded = load(GetParam());
  RunningEngine engine(config_for(GetParam()));
  EXPECT_TRUE(engine->encoder_decoder());
  const int n = static_cast<int>(ref.greedy_ids.size());
  const Collected got = run_one(*engine, request_of(ref.encoder_ids, n));
  ASSERT_EQ(got.reason, FinishReason::kLength) << got.error;
  EXPECT_EQ(got.usage.prompt_tokens, static_cast<int>(ref.encoder_ids.size()));
  EXPECT_EQ(got.usage.completion_tokens, n);
  const auto direct = direct_tokens(*loaded.seq2seq, loaded.generation.eos_token_ids,
                                    ref.encoder_ids, request_of(ref.encoder_ids, n), 0);
  EXPECT_EQ(got.ids, direct) << GetParam();
  std::size_t same = 0;
  while (same < ref.greedy_margins.size() && ref.greedy_margins[same] > 4e-3)
    ++same;
  ASSERT_GT(same, 0u);
  ASSERT_GE(got.ids.size(), same);
  EXPECT_EQ(std::vector<std::int32_t>(got.ids.begin(), got.ids.begin() + same),
            std::vector<std::int32_t>(ref.greedy_ids.begin(), ref.greedy_ids.begin() + same))
      << GetParam() << ": transformers' greedy tokens before the first near tie";
  EngineMetrics m = engine->metrics(asio::use_future).get();
  EXPECT_EQ(m.kv_pages_used, 0);
}

TEST_P(Seq2SeqEngine, SampledWithAForcedPrefixEqualsTheSession) {
  const Reference ref = read_reference(fixture(GetParam()));
  const LoadedModel loaded = load(GetParam());
  RunningEngine engine(config_for(GetParam()));
  GenerateRequest r = request_of(ref.encoder_ids, 12);
  r.sampling.temperature = 0.9f;
  r.sampling.top_k = 20;
  r.sampling.top_p = 0.95f;
  r.sampling.repetition_penalty = 1.3f;
  r.sampling.seed = 11;
  r.sampling.logprobs = 2;
  r.decoder_prefix_ids = {ref.greedy_ids[0], ref.greedy_ids[1]};
  const Collected got = run_one(*engine, r);
  ASSERT_EQ(got.reason, FinishReason::kLength) << got.error;
  EXPECT_EQ(got.usage.completion_tokens, 12);  // the forced prefix is not output
  EXPECT_EQ(got.ids, direct_tokens(*loaded.seq2seq, loaded.generation.eos_token_ids,
                                   ref.encoder_ids, r, 11));
  ASSERT_EQ(got.logprobs.size(), got.ids.size());
  EXPECT_EQ(got.logprobs[0].top.size(), 2u);
}

TEST_P(Seq2SeqEngine, BatchedRequestsGiveTheTokensEachGivesAlone) {
  const Reference ref = read_reference(fixture(GetParam()));
  RunningEngine engine(config_for(GetParam()));
  // Sources of several lengths (cross pages of 1 to 3 pages), greedy and seeded.
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 8; ++i) {
    const std::size_t len = 3 + static_cast<std::size_t>(i) * 5 % (ref.encoder_ids.size() - 10);
    std::vector<std::int32_t> source(ref.encoder_ids.begin() + i,
                                     ref.encoder_ids.begin() + i + static_cast<long>(len));
    GenerateRequest r = request_of(source, 6 + 3 * i);
    if (i % 2 == 1) {
      r.sampling.temperature = 1.0f;
      r.sampling.seed = 100 + static_cast<std::uint64_t>(i);
    }
    requests.push_back(std::move(r));
  }
  std::vector<Collected> alone;
  for (const auto& r : requests)
    alone.push_back(run_one(*engine, r));
  const EngineMetrics before = engine->metrics(asio::use_future).get();
  // Every submission is posted before waiting for any (waiting for each in turn let the
  // engine step the first ones alone on a loaded machine).
  std::vector<std::future<std::shared_ptr<RequestStream>>> submitted;
  for (const auto& r : requests)
    submitted.push_back(engine->submit(r, asio::use_future));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (auto& f : submitted)
    streams.push_back(f.get());
  int output_tokens = 0;
  for (std::size_t i = 0; i < streams.size(); ++i) {
    const Collected got = collect(streams[i]);
    ASSERT_EQ(got.reason, FinishReason::kLength) << got.error;
    EXPECT_EQ(got.ids, alone[i].ids) << GetParam() << ": request " << i;
    output_tokens += static_cast<int>(got.ids.size());
  }
  const EngineMetrics after = engine->metrics(asio::use_future).get();
  // Together: the longest request's 27 steps and some for arrivals, against the 140 steps
  // (one per token, and a prefill each) of one request at a time.
  EXPECT_LT(after.steps - before.steps, static_cast<std::uint64_t>(output_tokens) * 3 / 4)
      << "the requests did not run together";
  EXPECT_EQ(after.kv_pages_used, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Seq2SeqEngine,
                         ::testing::Values("t5", "t5_gated_untied", "mt5", "m2m100"),
                         [](const auto& p) { return p.param; });

TEST(Seq2SeqEngineLifecycle, CancelMidGenerationReturnsEveryPage) {
  const Reference ref = read_reference(fixture("t5"));
  RunningEngine engine(config_for("t5"));
  const EngineMetrics empty = engine->metrics(asio::use_future).get();
  ASSERT_GT(empty.kv_pages_total, 0);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 4; ++i) {
    streams.push_back(engine->submit(request_of(ref.encoder_ids, 400), asio::use_future).get());
  }
  // A few tokens each (all four fit the pool at once), then cancel them all mid-generation.
  for (auto& s : streams) {
    for (int k = 0; k < 3; ++k) {
      Event e = s->next(asio::use_future).get();
      ASSERT_EQ(e.kind, Event::Kind::kDelta);
    }
  }
  const EngineMetrics busy = engine->metrics(asio::use_future).get();
  EXPECT_GT(busy.kv_pages_used, 0);
  for (auto& s : streams)
    engine->cancel(s->id());
  for (auto& s : streams) {
    const Collected rest = collect(s);
    EXPECT_EQ(rest.reason, FinishReason::kCancelled);
  }
  const EngineMetrics after = engine->metrics(asio::use_future).get();
  EXPECT_EQ(after.kv_pages_used, 0);
  EXPECT_EQ(after.finished_cancelled, 4u);
  // The pool still serves a request whole afterwards.
  EXPECT_EQ(run_one(*engine, request_of(ref.encoder_ids, 5)).reason, FinishReason::kLength);
}

TEST(Seq2SeqEngineLifecycle, SamplesOfOneRequestEachEncodeAndSampleTheirOwn) {
  const Reference ref = read_reference(fixture("m2m100"));
  RunningEngine engine(config_for("m2m100"));
  GenerateRequest r = request_of(ref.encoder_ids, 8);
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 5;
  const Collected one = run_one(*engine, r);
  r.sampling.n = 3;
  auto stream = engine->submit(r, asio::use_future).get();
  std::vector<std::vector<std::int32_t>> ids(3);
  for (int finals = 0; finals < 3;) {
    Event e = stream->next(asio::use_future).get();
    if (e.kind == Event::Kind::kFinal) {
      EXPECT_EQ(e.finish_reason, FinishReason::kLength) << e.error;
      ++finals;
      continue;
    }
    auto& out = ids.at(static_cast<std::size_t>(e.index));
    out.insert(out.end(), e.token_ids.begin(), e.token_ids.end());
  }
  EXPECT_EQ(ids[0], one.ids) << "sample 0 draws as a request of one sample does";
  EXPECT_EQ(ids[1].size(), 8u);
  EXPECT_NE(ids[1], ids[0]);
  EXPECT_EQ(engine->metrics(asio::use_future).get().kv_pages_used, 0);
}

TEST(Seq2SeqEngineLifecycle, StopsAtTheDecodersEos) {
  // The tiny T5 samples its eos (1) third with this seed (as `weft generate` did directly).
  RunningEngine engine(config_for("../seq2seq_tiny/t5"));
  GenerateRequest r = request_of({5, 9, 3, 2}, 6, /*ignore_eos=*/false);
  r.sampling.temperature = 1.5f;
  r.sampling.seed = 7;
  const Collected got = run_one(*engine, r);
  EXPECT_EQ(got.reason, FinishReason::kStop) << got.error;
  EXPECT_EQ(got.ids, (std::vector<std::int32_t>{45, 19, 1}));
  EXPECT_EQ(got.usage.completion_tokens, 3);
  EXPECT_EQ(got.usage.prompt_tokens, 4);
  EXPECT_TRUE(got.text.empty());  // no tokenizer.json: ids only
}

TEST(Seq2SeqEngineLifecycle, RefusesWhatItDoesNotRunWithAReason) {
  RunningEngine engine(config_for("t5"));
  auto refused = [&](GenerateRequest r) {
    try {
      engine->submit(std::move(r), asio::use_future).get();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  GenerateRequest text;
  text.prompt = "hello";
  EXPECT_NE(refused(text).find("no tokenizer.json; give prompt_ids"), std::string::npos);
  GenerateRequest beams = request_of({5, 6, 1}, 4);
  beams.sampling.beam_width = 2;
  EXPECT_NE(refused(beams).find("beam_width > 1: not implemented for encoder-decoder"),
            std::string::npos);
  GenerateRequest json = request_of({5, 6, 1}, 4);
  json.response_format.type = ResponseFormat::Type::kJsonObject;
  EXPECT_NE(refused(json).find("response_format: not implemented"), std::string::npos);
  GenerateRequest prefix = request_of({5, 6, 1}, 4);
  prefix.decoder_prefix_ids = {100000};
  EXPECT_NE(refused(prefix).find("decoder_prefix_ids: 100000 is outside the vocabulary"),
            std::string::npos);
  // More than the whole pool could ever hold.
  EXPECT_NE(refused(request_of({5, 6, 1}, 1 << 20)).find("KV pages"), std::string::npos);

  EngineConfig speculating = config_for("t5");
  speculating.speculate = "prompt-lookup";
  try {
    RunningEngine e(speculating);
    ADD_FAILURE() << "speculation was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("speculative decoding"), std::string::npos) << e.what();
  }
}

// device "cuda" runs encoder-decoder models on the GPU (tests/actors/cuda/
// seq2seq_engine_cuda_test.cpp checks their tokens); without a GPU, or in a build without
// CUDA, the engine refuses with a message that says so, never a crash.
TEST(Seq2SeqEngineLifecycle, CudaDeviceWorksOrSaysWhyNot) {
  EngineConfig c = config_for("m2m100");
  c.device = "cuda";
  try {
    RunningEngine engine(c);
    const Collected got = run_one(*engine, request_of({5, 9, 3, 2}, 4));
    EXPECT_EQ(got.reason, FinishReason::kLength) << got.error;
    EXPECT_EQ(got.ids.size(), 4u);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
  }
}

// On a GPU a request's source and decoder each take at most the CUDA attention's 32768 keys;
// past them the request is refused at submit naming the field (the CPU has no such limit).
TEST(Seq2SeqEngineLimits, LengthsBeyondTheDeviceLimitAreRefusedNamingTheField) {
  EXPECT_EQ(actors::seq2seq_max_positions(actors::DeviceChoice{}), 0);
#if WEFT_HAVE_CUDA
  EXPECT_EQ(actors::seq2seq_max_positions(actors::DeviceChoice{true, 0}), 32768);
#endif
  EXPECT_TRUE(actors::check_seq2seq_lengths(0, 1u << 20, 1, 1 << 30));
  EXPECT_TRUE(actors::check_seq2seq_lengths(100, 100, 1, 99));
  auto source = actors::check_seq2seq_lengths(100, 101, 1, 5);
  ASSERT_FALSE(source);
  EXPECT_EQ(source.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(source.error().what()).find("prompt: 101 tokens"), std::string::npos)
      << source.error().what();
  auto decoder = actors::check_seq2seq_lengths(100, 10, 3, 98);
  ASSERT_FALSE(decoder);
  EXPECT_NE(std::string(decoder.error().what()).find("max_tokens: 98 after 3"), std::string::npos)
      << decoder.error().what();
  EXPECT_NE(std::string(decoder.error().what()).find("at most 97"), std::string::npos);
}

}  // namespace
}  // namespace weft
