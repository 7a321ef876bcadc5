// Engine::embed with device "cuda" (an encoder on the GPU, model::CudaEncoder): concurrent
// requests of texts of different lengths, batched into shared forward passes, give what the
// CPU engine gives within bf16's tolerance (tests/runtime/model/cuda/cuda_encoder_test.cpp),
// with pooling, normalization and truncation as on the CPU. Skips without a GPU.

#include <gtest/gtest.h>

#include <boost/asio/use_future.hpp>
#include <cmath>
#include <future>

#include "kernels/cuda/device_info.hpp"
#include "tests/runtime/model/reference_fixture.hpp"
#include "weft/engine.hpp"
#include "weft/runtime.hpp"

namespace weft {
namespace {

namespace asio = boost::asio;

EngineConfig encoder_config(const std::string& device) {
  EngineConfig c;
  c.model_dir = (testing::source_dir() / "tests" / "fixtures" / "bert" / "bert_tiny").string();
  c.device = device;
  c.cpu_threads = 2;
  c.max_tokens_per_step = 24;  // several steps for the requests below
  return c;
}

TEST(EmbeddingCudaEngine, MatchesTheCpuEngine) {
  const auto list = cuda::visible_devices();
  if (list.devices.empty()) {
    GTEST_SKIP() << "no GPU visible (" << list.unavailable_reason
                 << "): GPU checks run on the device machine through scripts/gpu-check";
  }
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
  Engine cpu(runtime.executor(), encoder_config("cpu"));
  Engine gpu(runtime.executor(), encoder_config("cuda"));
  ASSERT_TRUE(gpu.embeds());
  const std::vector<std::string> inputs = {"hello world",
                                           "the quick brown fox jumps over the lazy dog", "x",
                                           "searching documents and sentence vectors", "hello"};
  std::string long_text;
  for (int i = 0; i < 80; ++i)
    long_text += "fox ";
  for (const auto pooling : {EmbeddingPooling::kMean, EmbeddingPooling::kCls}) {
    for (const bool normalize : {false, true}) {
      std::vector<std::future<EmbedResult>> on_gpu, on_cpu;
      for (const auto& text : inputs) {
        EmbedRequest r;
        r.texts = {text, long_text};
        r.pooling = pooling;
        r.normalize = normalize;
        r.truncate = true;
        on_gpu.push_back(gpu.embed(r, asio::use_future));
        on_cpu.push_back(cpu.embed(r, asio::use_future));
      }
      for (std::size_t i = 0; i < inputs.size(); ++i) {
        const EmbedResult g = on_gpu[i].get(), c = on_cpu[i].get();
        EXPECT_EQ(g.prompt_tokens, c.prompt_tokens);
        ASSERT_EQ(g.embeddings.size(), 2u);
        for (std::size_t k = 0; k < 2; ++k) {
          ASSERT_EQ(g.embeddings[k].size(), c.embeddings[k].size());
          for (std::size_t j = 0; j < c.embeddings[k].size(); ++j) {
            EXPECT_NEAR(g.embeddings[k][j], c.embeddings[k][j], 6e-2)
                << "input " << i << "." << k << " element " << j;
          }
        }
      }
    }
  }
  gpu.shutdown(asio::use_future).get();
  cpu.shutdown(asio::use_future).get();
}

}  // namespace
}  // namespace weft
