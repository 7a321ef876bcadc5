// The engine with KV-Compress on a GPU (device "cuda:0"; docs/kv-compress.md): weft-tiny serving
// many requests through a small pool compresses them, frees their pages, keeps each request's
// first token exact (the GPU engine's own without compression), gives every page back,
// cancellations included, and its greedy output follows the CPU engine's at the same rate.
// Skips without a GPU (scripts/gpu-check runs it on the device machine).

#include <gtest/gtest.h>

#include <boost/asio/use_future.hpp>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "kernels/cuda/device_info.hpp"
#include "tests/actors/collect_stream.hpp"
#include "weft/engine.hpp"
#include "weft/runtime.hpp"

namespace weft {
namespace {

namespace asio = boost::asio;

using test_support::collect;

// weft-tiny's pages of 16 tokens: 64 KB in bf16 on the GPU, 128 KB in fp32 on the CPU.
EngineConfig tiny(const std::string& device, int pages) {
  const char* env = std::getenv("WEFT_TEST_SOURCE_DIR");
  const std::filesystem::path source = env != nullptr && *env != '\0' ? env : WEFT_SOURCE_DIR;
  EngineConfig c;
  c.model_dir = (source / "models/weft-tiny").string();
  c.device = device;
  c.cpu_threads = 4;
  c.kv_budget_bytes = static_cast<std::int64_t>(pages) * (device == "cpu" ? 131072 : 65536);
  return c;
}

GenerateRequest greedy(const std::vector<std::int32_t>& prompt, int max_tokens) {
  GenerateRequest r;
  r.prompt_ids = prompt;
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

std::vector<std::vector<std::int32_t>> prompts() {
  std::vector<std::vector<std::int32_t>> all;
  for (int r = 0; r < 12; ++r) {
    std::vector<std::int32_t> p;
    for (int i = 0; i < 150 + 4 * r; ++i)
      p.push_back(static_cast<std::int32_t>(300 + (i * 37 + r * 101) % 7000));
    all.push_back(p);
  }
  return all;
}

#define SKIP_WITHOUT_GPU()                                                                 \
  do {                                                                                     \
    const auto devices = cuda::visible_devices();                                          \
    if (devices.devices.empty()) {                                                         \
      GTEST_SKIP() << "no GPU visible (" << devices.unavailable_reason                     \
                   << "): GPU checks run on the device machine through scripts/gpu-check"; \
    }                                                                                      \
  } while (0)

// 12 requests of 150-200 prompt tokens through 48 pages (768 tokens): uncompressed about three
// fit at once; at rate 0.5 each gives back 4-6 pages after its prefill.
TEST(CudaKvCompressEngine, CompressesFreesPagesAndReturnsEveryPage) {
  SKIP_WITHOUT_GPU();
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
  EngineConfig c = tiny("cuda:0", 48);
  c.prefix_cache = false;  // every page goes back to the free list, none stays cached
  const auto all = prompts();
  std::vector<std::int32_t> first_tokens;
  {
    Engine plain(runtime.executor(), c);
    for (int r = 0; r < 3; ++r)
      first_tokens.push_back(
          collect(plain.submit(greedy(all[static_cast<std::size_t>(r)], 1), asio::use_future).get())
              .ids.at(0));
    plain.shutdown(asio::use_future).get();
  }
  c.kv_compress_rate = 0.5;
  Engine engine(runtime.executor(), c);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& p : all)
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
  EXPECT_EQ(m.kv_pages_total, 48);
  std::cout << "[ measured ] GPU: " << m.kv_compressions << " compressions freed "
            << m.kv_compressed_pages << " pages of " << m.kv_pages_total << "; peak "
            << m.kv_pages_peak << "\n";
  EXPECT_GE(m.kv_compressions, 10u);
  EXPECT_GE(m.kv_compressed_pages, 40u);
  EXPECT_EQ(m.kv_pages_used, 0) << "every page came back";
  EXPECT_EQ(m.kv_pages_cached, 0) << "the pool's free count is its total again";
  EXPECT_EQ(m.finished_error, 0u);
  EXPECT_EQ(m.preemptions, 0u);
  engine.shutdown(asio::use_future).get();
}

// The same 12 greedy requests on the CPU engine and the GPU engine at rate 0.5: the GPU rounds
// to bf16, so outputs may part at a near tie; they part no earlier, on the whole, than the two
// engines' outputs without compression do.
TEST(CudaKvCompressEngine, GreedyOutputFollowsTheCpuEngineAtTheSameRate) {
  SKIP_WITHOUT_GPU();
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
  const auto all = prompts();
  auto outputs = [&](const std::string& device, double rate) {
    EngineConfig c = tiny(device, 256);
    c.kv_compress_rate = rate;
    Engine engine(runtime.executor(), c);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& p : all)
      streams.push_back(engine.submit(greedy(p, 24), asio::use_future).get());
    std::vector<std::vector<std::int32_t>> out;
    for (auto& s : streams)
      out.push_back(collect(s).ids);
    const EngineMetrics m = engine.metrics(asio::use_future).get();
    EXPECT_EQ(m.kv_pages_used, 0) << device;
    if (rate > 0) {
      EXPECT_GE(m.kv_compressions, 12u) << device;
    }
    engine.shutdown(asio::use_future).get();
    return out;
  };
  auto agreed = [](const std::vector<std::vector<std::int32_t>>& a,
                   const std::vector<std::vector<std::int32_t>>& b) {
    int n = 0;
    for (std::size_t r = 0; r < a.size(); ++r) {
      std::size_t k = 0;
      while (k < std::min(a[r].size(), b[r].size()) && a[r][k] == b[r][k])
        ++k;
      n += static_cast<int>(k);
    }
    return n;
  };
  const int plain = agreed(outputs("cuda:0", 0.0), outputs("cpu", 0.0));
  const auto gpu = outputs("cuda:0", 0.5), cpu = outputs("cpu", 0.5);
  const int squeezed = agreed(gpu, cpu);
  std::cout << "[ measured ] greedy tokens equal GPU vs CPU engine before the first difference, "
            << "of " << 12 * 24 << ": rate 0 " << plain << ", rate 0.5 " << squeezed << "\n";
  EXPECT_GE(squeezed, plain / 2);
  int first_equal = 0;
  for (std::size_t r = 0; r < gpu.size(); ++r)
    first_equal += !gpu[r].empty() && !cpu[r].empty() && gpu[r][0] == cpu[r][0];
  EXPECT_GE(first_equal, 11);
}

}  // namespace
}  // namespace weft
