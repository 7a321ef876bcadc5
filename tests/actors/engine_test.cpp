// The Engine end to end on weft-tiny (models/weft-tiny), on the CPU, through its public API.

#include "weft/engine.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <filesystem>
#include <fstream>
#include <future>

#include "tests/actors/collect_stream.hpp"
#include "tests/actors/tiny_engine.hpp"
#include "weft/runtime.hpp"

namespace weft {
namespace {

namespace asio = boost::asio;

using test_support::tiny_config;

using test_support::collect;
using test_support::Collected;

GenerateRequest greedy(std::string prompt, int max_tokens) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

class EngineTest : public ::testing::Test {
 protected:
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
};

TEST_F(EngineTest, GreedyRequestIsBatchInvariant) {
  Engine engine(runtime.executor(), tiny_config());
  const std::string prompt = "Fellow-Citizens of the Senate and House of Representatives:";
  Collected alone = collect(engine.submit(greedy(prompt, 24), asio::use_future).get());
  ASSERT_EQ(alone.reason, FinishReason::kLength);
  ASSERT_EQ(alone.ids.size(), 24u);
  EXPECT_EQ(alone.usage.completion_tokens, 24);

  const EngineMetrics before = engine.metrics(asio::use_future).get();
  ASSERT_LE(before.kv_pages_peak, 3) << "one 36-token sequence holds three 16-token pages";

  // The same request inside a batch of 64 mixed requests: other prompts, lengths, sampling.
  // Every request is submitted before any is waited for, so they run together.
  std::vector<std::future<std::shared_ptr<RequestStream>>> others;
  const char* prompts[] = {"Call me Ishmael.", "The whale", "In the year", "Our relations with"};
  std::future<std::shared_ptr<RequestStream>> ours;
  int others_tokens = 0;
  for (int i = 0; i < 64; ++i) {
    if (i == 37) {
      ours = engine.submit(greedy(prompt, 24), asio::use_future);
      continue;
    }
    GenerateRequest r = greedy(std::string(prompts[i % 4]) + std::string(i % 7, '!'), 4 + i % 29);
    if (i % 3 == 0) {
      r.sampling.temperature = 0.9f;
      r.sampling.seed = static_cast<std::uint64_t>(i);
    }
    others_tokens += r.sampling.max_tokens;
    others.push_back(engine.submit(std::move(r), asio::use_future));
  }
  Collected batched = collect(ours.get());
  for (auto& s : others)
    EXPECT_EQ(collect(s.get()).reason, FinishReason::kLength);
  EXPECT_EQ(batched.ids, alone.ids) << "greedy output changed inside a batch";
  EXPECT_EQ(batched.text, alone.text);
  auto m = engine.metrics(asio::use_future).get();
  EXPECT_EQ(m.kv_pages_used, 0) << "pages not freed";
  EXPECT_EQ(m.finished_length, 65u);
  EXPECT_EQ(m.preemptions, 0u);
  // Not vacuous: the 64 ran as one batch. One at a time they would take at least
  // `others_tokens` + 24 steps and never hold more than three pages; together, the longest
  // (32 tokens) plus a few prefill steps, while every sequence holds at least a page.
  const std::uint64_t batch_steps = m.steps - before.steps;
  EXPECT_LT(batch_steps, 64u) << "of " << others_tokens + 24 << " tokens";
  EXPECT_GE(m.kv_pages_peak, 48) << "fewer than 48 sequences were ever running at once";
  engine.shutdown(asio::use_future).get();
}

TEST_F(EngineTest, SeededSamplingIsReproducibleWhateverTheBatch) {
  Engine engine(runtime.executor(), tiny_config());
  GenerateRequest r;
  r.prompt = "Call me Ishmael.";
  r.sampling.temperature = 1.0f;
  r.sampling.top_p = 0.9f;
  r.sampling.seed = 1234;
  r.sampling.max_tokens = 20;
  r.sampling.ignore_eos = true;
  Collected first = collect(engine.submit(r, asio::use_future).get());
  std::vector<std::shared_ptr<RequestStream>> noise;
  for (int i = 0; i < 8; ++i)
    noise.push_back(engine.submit(greedy("The whale", 10), asio::use_future).get());
  Collected second = collect(engine.submit(r, asio::use_future).get());
  for (auto& s : noise)
    collect(s);
  EXPECT_EQ(first.ids, second.ids);
}

TEST_F(EngineTest, CallbackFutureAndCoroutineAllWork) {
  Engine engine(runtime.executor(), tiny_config());
  std::promise<std::shared_ptr<RequestStream>> via_callback;
  engine.submit(greedy("The whale", 3),
                [&](std::exception_ptr e, std::shared_ptr<RequestStream> s) {
                  if (e)
                    via_callback.set_exception(e);
                  else
                    via_callback.set_value(std::move(s));
                });
  EXPECT_EQ(collect(via_callback.get_future().get()).ids.size(), 3u);

  auto via_coroutine = asio::co_spawn(
      runtime.executor(),
      [&engine]() -> asio::awaitable<std::string> {
        auto stream = co_await engine.submit(greedy("The whale", 5), asio::use_awaitable);
        std::string text;
        for (;;) {
          Event e = co_await stream->next(asio::use_awaitable);
          if (e.kind == Event::Kind::kFinal) break;
          text += e.text;
        }
        co_return text;
      },
      asio::use_future);
  std::string text = via_coroutine.get();
  EXPECT_EQ(text, collect(engine.submit(greedy("The whale", 5), asio::use_future).get()).text);
  EXPECT_FALSE(text.empty());
}

// n samples of one prompt share its KV pages. Greedy samples read the parent's pages for the
// shared part of the prompt, so they must equal the single greedy answer exactly; seeded
// samples must differ from one another.
TEST_F(EngineTest, SamplesShareThePromptAndStayCorrect) {
  Engine engine(runtime.executor(), tiny_config());
  const std::string prompt =
      "Fellow-Citizens of the Senate and House of Representatives: It is with great "
      "satisfaction that I am able to announce the continued prosperity of the country";
  Collected single = collect(engine.submit(greedy(prompt, 12), asio::use_future).get());
  ASSERT_GT(single.usage.prompt_tokens, 16) << "the prompt must span a full 16-token page";

  auto collect_samples = [](std::shared_ptr<RequestStream> stream, int n) {
    std::vector<Collected> out(static_cast<std::size_t>(n));
    for (int finals = 0; finals < n;) {
      Event e = stream->next(asio::use_future).get();
      Collected& c = out.at(static_cast<std::size_t>(e.index));
      if (e.kind == Event::Kind::kFinal) {
        c.reason = e.finish_reason;
        c.usage = e.usage;
        ++finals;
      } else {
        c.text += e.text;
        c.ids.insert(c.ids.end(), e.token_ids.begin(), e.token_ids.end());
      }
    }
    EXPECT_THROW(stream->next(asio::use_future).get(), Error) << "nothing after n finals";
    return out;
  };
  GenerateRequest r = greedy(prompt, 12);
  r.sampling.n = 4;
  for (const Collected& c : collect_samples(engine.submit(r, asio::use_future).get(), 4)) {
    EXPECT_EQ(c.ids, single.ids);
    EXPECT_EQ(c.reason, FinishReason::kLength);
  }
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 99;
  auto sampled = collect_samples(engine.submit(r, asio::use_future).get(), 4);
  EXPECT_NE(sampled[0].ids, sampled[1].ids);
  EXPECT_NE(sampled[2].ids, sampled[3].ids);
  // Cancel by request id ends every sample.
  r.sampling.max_tokens = 300;
  auto stream = engine.submit(r, asio::use_future).get();
  stream->next(asio::use_future).get();
  engine.cancel(stream->id());
  for (const Collected& c : collect_samples(stream, 4)) {
    EXPECT_EQ(c.reason, FinishReason::kCancelled);
  }
  EXPECT_EQ(engine.metrics(asio::use_future).get().kv_pages_used, 0);
}

// A cancel pushes a sample's final event from the scheduler's strand while the detokenizer
// may still push that sample's last delta from its own: the stream drops what comes after a
// sample's final, so a reader never sees an event after n finals (this raced in
// SamplesShareThePromptAndStayCorrect under load).
TEST(RequestStreamTest, DropsEventsAfterASamplesFinal) {
  auto stream = std::make_shared<RequestStream>(7, 2);
  auto event = [](Event::Kind kind, int index, std::string text) {
    Event e;
    e.kind = kind;
    e.index = index;
    e.text = std::move(text);
    return e;
  };
  stream->push(event(Event::Kind::kDelta, 0, "a"));
  stream->push(event(Event::Kind::kFinal, 0, ""));
  stream->push(event(Event::Kind::kDelta, 0, "late"));  // dropped
  stream->push(event(Event::Kind::kFinal, 0, ""));      // a second final: dropped
  stream->push(event(Event::Kind::kDelta, 1, "b"));
  stream->push(event(Event::Kind::kFinal, 1, ""));
  std::vector<std::string> seen;
  for (int i = 0; i < 4; ++i) {
    Event e = stream->next(asio::use_future).get();
    seen.push_back(std::to_string(e.index) + (e.kind == Event::Kind::kFinal ? "F" : e.text));
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"0a", "0F", "1b", "1F"}));
  EXPECT_THROW(stream->next(asio::use_future).get(), Error);
}

TEST_F(EngineTest, CancelEndsTheStreamAndFreesPages) {
  Engine engine(runtime.executor(), tiny_config());
  auto stream = engine.submit(greedy("The whale", 500), asio::use_future).get();
  Event first = stream->next(asio::use_future).get();
  ASSERT_EQ(first.kind, Event::Kind::kDelta);
  engine.cancel(stream->id());
  engine.cancel(987654321);  // unknown id: a no-op
  Collected rest = collect(stream);
  EXPECT_EQ(rest.reason, FinishReason::kCancelled);
  EXPECT_LT(rest.usage.completion_tokens, 500);
  auto m = engine.metrics(asio::use_future).get();
  EXPECT_EQ(m.kv_pages_used, 0);
  EXPECT_EQ(m.finished_cancelled, 1u);
  EXPECT_THROW(stream->next(asio::use_future).get(), Error) << "nothing after the final event";
}

TEST_F(EngineTest, StopStringIsWithheldAndEndsTheRequest) {
  Engine engine(runtime.executor(), tiny_config());
  Collected free_run =
      collect(engine.submit(greedy("Call me Ishmael.", 40), asio::use_future).get());
  ASSERT_GT(free_run.text.size(), 12u);
  // Stop at a piece of text the free run is known to produce.
  const std::string stop = free_run.text.substr(8, 4);
  GenerateRequest r = greedy("Call me Ishmael.", 40);
  r.sampling.stop = {stop};
  Collected stopped = collect(engine.submit(r, asio::use_future).get());
  EXPECT_EQ(stopped.reason, FinishReason::kStop);
  EXPECT_EQ(stopped.text, free_run.text.substr(0, free_run.text.find(stop)));
}

// A stop token id ends the sequence with reason stop; the stop token is the last one emitted
// (as vLLM's token_ids), and nothing after it.
TEST_F(EngineTest, StopTokenIdEndsTheRequestThere) {
  Engine engine(runtime.executor(), tiny_config());
  Collected free_run =
      collect(engine.submit(greedy("Call me Ishmael.", 30), asio::use_future).get());
  ASSERT_EQ(free_run.ids.size(), 30u);
  // A token the free run produces, first at `cut` (> 0, so the request does not stop at once).
  const std::int32_t stop_id = free_run.ids[10];
  const auto cut = static_cast<std::size_t>(
      std::find(free_run.ids.begin(), free_run.ids.end(), stop_id) - free_run.ids.begin());
  ASSERT_GT(cut, 0u) << "pick a token the free run does not start with";
  GenerateRequest r = greedy("Call me Ishmael.", 30);
  r.sampling.stop_token_ids = {stop_id};
  Collected stopped = collect(engine.submit(r, asio::use_future).get());
  EXPECT_EQ(stopped.reason, FinishReason::kStop);
  const std::vector<std::int32_t> expected(free_run.ids.begin(),
                                           free_run.ids.begin() + static_cast<long>(cut) + 1);
  EXPECT_EQ(stopped.ids, expected);
  EXPECT_EQ(stopped.usage.completion_tokens, static_cast<int>(cut) + 1);
  EXPECT_EQ(free_run.text.rfind(stopped.text, 0), 0u) << "the text is a prefix of the free run";
  EXPECT_EQ(engine.metrics(asio::use_future).get().finished_stop, 1u);
}

TEST_F(EngineTest, ShutdownEndsLiveRequestsAndRefusesNewOnes) {
  Engine engine(runtime.executor(), tiny_config());
  auto stream = engine.submit(greedy("The whale", 800), asio::use_future).get();
  stream->next(asio::use_future).get();
  engine.shutdown(asio::use_future).get();
  Collected rest = collect(stream);
  EXPECT_EQ(rest.reason, FinishReason::kShutdown);
  try {
    engine.submit(greedy("The whale", 3), asio::use_future).get();
    FAIL() << "submit after shutdown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kShutdown);
  }
}

TEST_F(EngineTest, BadRequestsAreRefusedWithTheFieldNamed) {
  Engine engine(runtime.executor(), tiny_config());
  auto error_of = [&](GenerateRequest r) -> std::string {
    try {
      engine.submit(std::move(r), asio::use_future).get();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  GenerateRequest r = greedy("The whale", 5);
  r.sampling.top_p = 1.5f;
  EXPECT_NE(error_of(r).find("top_p"), std::string::npos);
  r = greedy("The whale", 5);
  r.sampling.temperature = -1;
  EXPECT_NE(error_of(r).find("temperature"), std::string::npos);
  r = greedy("The whale", 2000);
  EXPECT_NE(error_of(r).find("max_tokens"), std::string::npos);
  r = greedy(std::string(6000, 'x') + " whale whale", 5);
  EXPECT_NE(error_of(r).find("prompt"), std::string::npos);
  r = greedy("", 5);
  EXPECT_NE(error_of(r).find("prompt"), std::string::npos);
  r = greedy("The whale", 5);
  r.sampling.n = 0;
  EXPECT_NE(error_of(r).find("n"), std::string::npos);
  r = GenerateRequest{};
  r.prompt_ids = {1, 99999};
  EXPECT_NE(error_of(r).find("prompt_ids: 99999"), std::string::npos);
  engine.shutdown(asio::use_future).get();
}

TEST(EngineConfigTest, ValidatesEachField) {
  EngineConfig c = tiny_config();
  EXPECT_TRUE(c.validate().ok());
  c.page_size = 0;
  EXPECT_NE(std::string(c.validate().error().what()).find("page_size"), std::string::npos);
  c = tiny_config();
  c.admission = "greedy";
  EXPECT_NE(std::string(c.validate().error().what()).find("admission"), std::string::npos);
  c = tiny_config();
  c.schedule_policy = "sjf";
  EXPECT_NE(std::string(c.validate().error().what())
                .find("schedule_policy: \"sjf\" must be \"fcfs\" or \"lof\""),
            std::string::npos);
  c = tiny_config();
  c.device = "cuda:x";  // cpu, cuda and cuda:N are spellings; whether GPU N exists is checked
  EXPECT_FALSE(c.validate().ok());  // when the engine starts
  c.device = "tpu";
  EXPECT_FALSE(c.validate().ok());
  c.device = "cuda:7";
  EXPECT_TRUE(c.validate().ok());
  c.gpu_memory_fraction = 1.5;
  EXPECT_NE(std::string(c.validate().error().what()).find("gpu_memory_fraction"),
            std::string::npos);
  auto missing = EngineConfig::from_file("/nonexistent/engine.json");
  EXPECT_FALSE(missing.ok());
}

// max_tokens_per_step 0 (the default) is 512, and 512 per GPU of a tensor-parallel group
// (docs/engine.md, scheduling defaults); a set value is kept; below 0 is refused by name.
TEST(EngineConfigTest, StepTokenBudgetIs512PerGpuOfTheGroupByDefault) {
  EngineConfig c;
  EXPECT_EQ(c.max_tokens_per_step, 0);
  EXPECT_EQ(c.step_token_budget(), 512);  // the CPU
  c.device = "cuda:0";
  EXPECT_EQ(c.step_token_budget(), 512);  // one GPU, no group
  EXPECT_EQ(c.step_token_budget(true, 2), 1024);
  EXPECT_EQ(c.step_token_budget(true, 4), 2048);
  EXPECT_EQ(c.step_token_budget(false, 4), 512);  // CPU ranks over MPI
  EXPECT_EQ(c.step_token_budget(true, 0), 512);
  c.max_tokens_per_step = 300;
  EXPECT_EQ(c.step_token_budget(), 300);
  EXPECT_EQ(c.step_token_budget(true, 4), 300);
  c = tiny_config();
  c.max_tokens_per_step = 0;
  EXPECT_TRUE(c.validate().ok());
  c.max_tokens_per_step = -1;
  ASSERT_FALSE(c.validate().ok());
  EXPECT_NE(std::string(c.validate().error().what()).find("max_tokens_per_step: -1"),
            std::string::npos);
}

// A temporary file removed when the test ends.
struct TempJson {
  explicit TempJson(const std::string& text) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = std::filesystem::temp_directory_path() /
           (std::string("weft_") + info->name() + "_" + std::to_string(::getpid()) + "_" +
            std::to_string(counter++) + ".json");
    std::ofstream(path) << text;
  }
  ~TempJson() { std::filesystem::remove(path); }
  std::filesystem::path path;
  static inline int counter = 0;
};

TEST(EngineConfigTest, FromFileReadsEveryField) {
  TempJson file(R"({
    "model_dir": "/models/tiny",
    "spec_file": "config/models/llama.json",
    "quantize": "q4_b32",
    "device": "cuda:1",
    "page_size": 8,
    "kv_budget_bytes": 123456789012,
    "max_tokens_per_step": 256,
    "max_running": 32,
    "admission": "optimistic",
    "cpu_threads": 3,
    "gpu_memory_fraction": 0.75,
    "jump_forward": false,
    "prefix_cache": false,
    "overlap_steps": false
  })");
  auto read = EngineConfig::from_file(file.path);
  ASSERT_TRUE(read.ok()) << read.error().what();
  const EngineConfig& c = read.value();
  EXPECT_EQ(c.model_dir, "/models/tiny");
  EXPECT_EQ(c.spec_file, "config/models/llama.json");
  EXPECT_EQ(c.quantize, "q4_b32");
  EXPECT_EQ(c.device, "cuda:1");
  EXPECT_EQ(c.page_size, 8);
  EXPECT_EQ(c.kv_budget_bytes, 123456789012);
  EXPECT_EQ(c.max_tokens_per_step, 256);
  EXPECT_EQ(c.max_running, 32);
  EXPECT_EQ(c.admission, "optimistic");
  EXPECT_EQ(c.cpu_threads, 3u);
  EXPECT_DOUBLE_EQ(c.gpu_memory_fraction, 0.75);
  EXPECT_FALSE(c.jump_forward);
  EXPECT_FALSE(c.prefix_cache);
  EXPECT_FALSE(c.overlap_steps);

  // Fields left out keep their defaults.
  TempJson minimal(R"({"model_dir": "/models/tiny"})");
  auto defaults = EngineConfig::from_file(minimal.path);
  ASSERT_TRUE(defaults.ok()) << defaults.error().what();
  EXPECT_EQ(defaults.value().page_size, EngineConfig{}.page_size);
  EXPECT_EQ(defaults.value().device, "cpu");
  EXPECT_EQ(defaults.value().admission, "reserve");
  EXPECT_TRUE(defaults.value().jump_forward);
  EXPECT_TRUE(defaults.value().overlap_steps);
  EXPECT_TRUE(defaults.value().prefix_cache);
}

TEST(EngineConfigTest, UnknownQuantizeFormatListsTheSupportedOnes) {
  EngineConfig c;
  c.model_dir = "/m";
  c.quantize = "q4_k";
  auto ok = c.validate();
  ASSERT_FALSE(ok);
  const std::string message = ok.error().what();
  EXPECT_NE(message.find("quantize: unknown quantization format \"q4_k\""), std::string::npos)
      << message;
  EXPECT_NE(message.find("q3h_b64"), std::string::npos) << message;
  c.quantize = "Q3H";
  EXPECT_TRUE(c.validate());
}

TEST(EngineConfigTest, FromFileNamesTheBadField) {
  auto error_of = [](const std::string& text) -> std::string {
    TempJson file(text);
    auto read = EngineConfig::from_file(file.path);
    if (read.ok()) return "";
    EXPECT_EQ(read.error().code(), ErrorCode::kParse) << read.error().what();
    const std::string message = read.error().what();
    EXPECT_NE(message.find(file.path.string()), std::string::npos) << message;
    return message;
  };
  std::string e = error_of(R"({"model_dir": "/m", "page_sise": 8})");
  EXPECT_NE(e.find("unknown field \"page_sise\""), std::string::npos) << e;
  e = error_of(R"({"model_dir": "/m", "page_size": "16"})");
  EXPECT_NE(e.find("\"page_size\" must be an integer"), std::string::npos) << e;
  e = error_of(R"({"model_dir": "/m", "prefix_cache": "yes"})");
  EXPECT_NE(e.find("\"prefix_cache\" must be true or false"), std::string::npos) << e;
  e = error_of(R"({"model_dir": 7})");
  EXPECT_NE(e.find("\"model_dir\" must be a string"), std::string::npos) << e;
  e = error_of(R"({"model_dir": "/m", "gpu_memory_fraction": "most"})");
  EXPECT_NE(e.find("\"gpu_memory_fraction\" must be a number"), std::string::npos) << e;
  e = error_of(R"({"model_dir": "/m", "max_running": 1.5})");
  EXPECT_NE(e.find("\"max_running\" must be an integer"), std::string::npos) << e;
  e = error_of(R"({"model_dir": "/m", "jump_forward": 1})");
  EXPECT_NE(e.find("\"jump_forward\" must be true or false"), std::string::npos) << e;
  e = error_of(R"([1, 2])");
  EXPECT_NE(e.find("a JSON object"), std::string::npos) << e;
  // Well-typed but out of range: validate() names the field.
  TempJson range(R"({"model_dir": "/m", "page_size": 0})");
  auto out_of_range = EngineConfig::from_file(range.path);
  ASSERT_FALSE(out_of_range.ok());
  EXPECT_NE(std::string(out_of_range.error().what()).find("page_size"), std::string::npos);
}

TEST(EngineConfigTest, BadModelFolderThrowsWithThePath) {
  Runtime runtime(RuntimeOptions{.worker_threads = 1});
  EngineConfig c = tiny_config();
  c.model_dir = "/nonexistent/model";
  try {
    Engine engine(runtime.executor(), c);
    FAIL() << "an engine over a missing folder";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model"), std::string::npos);
  }
}

}  // namespace
}  // namespace weft
