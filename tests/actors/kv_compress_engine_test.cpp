// The engine with KV-Compress (docs/kv-compress.md): the config fields are read and checked
// (values named, speculation refused, a GPU device accepted), and weft-tiny serving many requests
// through a small pool compresses them, frees their pages, keeps each request's first token
// exact, and gives every page back, cancellations included.

#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/use_future.hpp>
#include <filesystem>
#include <fstream>

#include "tests/actors/collect_stream.hpp"
#include "tests/actors/tiny_engine.hpp"
#include "weft/engine.hpp"
#include "weft/runtime.hpp"

namespace weft {
namespace {

namespace asio = boost::asio;

using test_support::collect;
using test_support::tiny_config;

std::string message_of(const Result<void>& r) {
  return r.ok() ? std::string() : std::string(r.error().what());
}

TEST(KvCompressConfig, ValidatesRateWindowAndSpeculation) {
  EngineConfig c = tiny_config();
  for (double ok : {0.0, 0.25, 0.9}) {
    c.kv_compress_rate = ok;
    EXPECT_TRUE(c.validate().ok()) << ok;
  }
  c.kv_compress_rate = 1.0;
  EXPECT_EQ(message_of(c.validate()), "kv_compress_rate: 1 is outside [0, 1) (0 turns it off)");
  c.kv_compress_rate = 0.5;
  c.kv_compress_window = 0;
  EXPECT_EQ(message_of(c.validate()), "kv_compress_window: 0 is outside [1, 4096]");
  c.kv_compress_window = 16;
  c.device = "cuda:0";  // the CUDA backend compresses too (kernels/cuda/kv_compress.hpp)
  EXPECT_TRUE(c.validate().ok()) << message_of(c.validate());
  c.device = "cpu";
  c.kv_compress_heads = "variable";
  EXPECT_TRUE(c.validate().ok()) << message_of(c.validate());
  c.kv_compress_heads = "some";
  EXPECT_EQ(message_of(c.validate()),
            "kv_compress_heads: \"some\" is not one of uniform, variable");
  c.kv_compress_heads = "uniform";
  c.speculate = "prompt-lookup";
  EXPECT_NE(message_of(c.validate()).find("do not mix"), std::string::npos);
}

TEST(KvCompressConfig, FromFileReadsTheFields) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("weft_kv_compress_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << R"({"model_dir": "/m", "kv_compress_rate": 0.5, "kv_compress_window": 8,
                            "kv_compress_heads": "variable"})";
  auto read = EngineConfig::from_file(path);
  ASSERT_TRUE(read.ok()) << read.error().what();
  EXPECT_EQ(read->kv_compress_rate, 0.5);
  EXPECT_EQ(read->kv_compress_window, 8);
  EXPECT_EQ(read->kv_compress_heads, "variable");
  std::ofstream(path) << R"({"model_dir": "/m", "kv_compress_rate": 2})";
  auto wrong = EngineConfig::from_file(path);
  std::filesystem::remove(path);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(std::string(wrong.error().what()).find("kv_compress_rate: 2 is outside"),
            std::string::npos)
      << wrong.error().what();
}

GenerateRequest greedy(const std::vector<std::int32_t>& prompt, int max_tokens) {
  GenerateRequest r;
  r.prompt_ids = prompt;
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

// 12 requests of 150-200 prompt tokens through a pool of 48 pages (768 tokens): uncompressed,
// about three fit at once; at rate 0.5 each gives back 4-6 pages after its prefill. `heads`:
// kv_compress_heads (the variable split frees the same pages).
void compresses_frees_pages_and_returns_every_page(const std::string& heads) {
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
  EngineConfig c = tiny_config();
  c.kv_budget_bytes = 48ll * 131072;
  c.prefix_cache = true;
  std::vector<std::vector<std::int32_t>> prompts;
  for (int r = 0; r < 12; ++r) {
    std::vector<std::int32_t> p;
    for (int i = 0; i < 150 + 4 * r; ++i)
      p.push_back(static_cast<std::int32_t>(300 + (i * 37 + r * 101) % 7000));
    prompts.push_back(p);
  }
  std::vector<std::int32_t> first_tokens;
  {
    Engine plain(runtime.executor(), c);
    for (int r = 0; r < 3; ++r)
      first_tokens.push_back(
          collect(
              plain.submit(greedy(prompts[static_cast<std::size_t>(r)], 1), asio::use_future).get())
              .ids.at(0));
    plain.shutdown(asio::use_future).get();
  }
  c.kv_compress_rate = 0.5;
  c.kv_compress_heads = heads;
  Engine engine(runtime.executor(), c);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& p : prompts)
    streams.push_back(engine.submit(greedy(p, 24), asio::use_future).get());
  engine.cancel(streams[5]->id());
  for (std::size_t r = 0; r < streams.size(); ++r) {
    const auto got = collect(streams[r]);
    if (r == 5) continue;
    EXPECT_EQ(got.ids.size(), 24u) << "request " << r << ": " << got.error;
    if (r < first_tokens.size() && !got.ids.empty()) {
      EXPECT_EQ(got.ids[0], first_tokens[r]) << "the compressing step is exact";
    }
  }
  const EngineMetrics m = engine.metrics(asio::use_future).get();
  EXPECT_GE(m.kv_compressions, 10u);
  EXPECT_GE(m.kv_compressed_pages, 40u);
  EXPECT_EQ(m.kv_pages_used, 0) << "every page came back";
  // Compressed pages never join the prefix cache; only request 5, if cancelled before its
  // compression, may have left its computed prompt pages there (at most 12).
  EXPECT_LE(m.kv_pages_cached, 12);
  EXPECT_EQ(m.preemptions, 0u);
  engine.shutdown(asio::use_future).get();
}

TEST(KvCompressEngine, CompressesFreesPagesAndReturnsEveryPage) {
  compresses_frees_pages_and_returns_every_page("uniform");
}

TEST(KvCompressEngine, VariableHeadsFreePagesAndReturnEveryPage) {
  compresses_frees_pages_and_returns_every_page("variable");
}

}  // namespace
}  // namespace weft
