// The engine with int8 and fp8 KV pages (docs/engine.md#kv-cache-dtype): the config field is
// read and checked, the pool is sized from the quantized page bytes and reported in the
// metrics, and weft-tiny's greedy output is f32 KV's.

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

TEST(KvCacheDtypeConfig, ValidatesTheSpellingAndTheDevice) {
  EngineConfig c = tiny_config();
  for (const char* ok : {"auto", "f32", "bf16", "fp16", "int8", "fp8"}) {
    c.kv_cache_dtype = ok;
    EXPECT_TRUE(c.validate().ok()) << ok;
  }
  c.kv_cache_dtype = "int4";
  auto bad = c.validate();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.error().what()).find("kv_cache_dtype"), std::string::npos)
      << bad.error().what();
  EXPECT_NE(std::string(bad.error().what()).find("int4"), std::string::npos);
  // A GPU keeps 16-bit pages in bf16 (the precision it runs in), int8 or fp8.
  c.device = "cuda:0";
  c.kv_cache_dtype = "f32";
  EXPECT_FALSE(c.validate().ok());
  c.kv_cache_dtype = "int8";
  EXPECT_TRUE(c.validate().ok());
}

TEST(KvCacheDtypeConfig, FromFileReadsTheField) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("weft_kv_cache_dtype_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << R"({"model_dir": "/models/tiny", "kv_cache_dtype": "fp8"})";
  auto read = EngineConfig::from_file(path);
  ASSERT_TRUE(read.ok()) << read.error().what();
  EXPECT_EQ(read->kv_cache_dtype, "fp8");
  std::ofstream(path) << R"({"model_dir": "/models/tiny", "kv_cache_dtype": 8})";
  auto wrong = EngineConfig::from_file(path);
  std::filesystem::remove(path);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(std::string(wrong.error().what()).find("kv_cache_dtype"), std::string::npos);
}

GenerateRequest greedy(std::string prompt, int max_tokens) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

// weft-tiny's page: 8 layers x 2 kv heads x 16 tokens x head_dim 64, K and V: 131072 bytes
// in f32; 4096 bytes of int8 elements and 256 of scales per layer, 34816 in all.
TEST(KvCacheDtypeEngine, PoolAndMetricsFollowThePageBytesAndGreedyOutputIsF32s) {
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
  const std::string prompt = "Call me Ishmael. Some years ago";
  EngineConfig c = tiny_config();  // 64 MiB of KV
  std::vector<std::int32_t> f32_ids;
  int f32_pages = 0;
  {
    Engine engine(runtime.executor(), c);
    const EngineMetrics m = engine.metrics(asio::use_future).get();
    EXPECT_EQ(m.kv_cache_dtype, "f32");
    EXPECT_EQ(m.kv_page_bytes, 131072);
    EXPECT_EQ(m.kv_pages_total, (64 << 20) / 131072);
    EXPECT_EQ(m.kv_pool_tokens, static_cast<std::int64_t>(m.kv_pages_total) * 16);
    f32_pages = m.kv_pages_total;
    f32_ids = collect(engine.submit(greedy(prompt, 20), asio::use_future).get()).ids;
    engine.shutdown(asio::use_future).get();
  }
  c.kv_cache_dtype = "int8";
  Engine engine(runtime.executor(), c);
  const EngineMetrics m = engine.metrics(asio::use_future).get();
  EXPECT_EQ(m.kv_cache_dtype, "int8");
  EXPECT_EQ(m.kv_page_bytes, 34816);
  EXPECT_EQ(m.kv_pages_total, (64 << 20) / 34816);
  EXPECT_EQ(m.kv_pool_tokens, static_cast<std::int64_t>(m.kv_pages_total) * 16);
  EXPECT_GT(m.kv_pages_total, 3 * f32_pages);
  const auto ids = collect(engine.submit(greedy(prompt, 20), asio::use_future).get()).ids;
  ASSERT_EQ(ids.size(), 20u);
  EXPECT_EQ(ids, f32_ids) << "int8 KV changed weft-tiny's greedy output";
  engine.shutdown(asio::use_future).get();
}

}  // namespace
}  // namespace weft
