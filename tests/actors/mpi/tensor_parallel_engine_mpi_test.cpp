// Run under `mpirun -np 2` (tests/actors/CMakeLists.txt): the Engine on rank 0 leading a
// tensor-parallel group, the other rank following its steps, against the Engine alone.

#include <gtest/gtest.h>

#include <boost/asio/use_future.hpp>
#include <cstdio>

#include "loaders/model_loader.hpp"
#include "runtime/parallel/mpi_communicator.hpp"
#include "runtime/parallel/step_broadcast.hpp"
#include "tests/actors/collect_stream.hpp"
#include "tests/actors/tiny_engine.hpp"
#include "tests/runtime/parallel/mpi/mpi_gtest_main.hpp"
#include "weft/engine.hpp"
#include "weft/runtime.hpp"

namespace weft {
namespace {

std::shared_ptr<parallel::Communicator> g_world;

GenerateRequest greedy(std::string prompt, int max_tokens) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

TEST(TensorParallelEngine, GivesTheTokensOfOneProcess) {
  auto& w = *g_world;
  ASSERT_EQ(w.size(), 2) << "run under mpirun -np 2";
  EngineConfig config = test_support::tiny_config();
  config.cpu_threads = 1;
  if (w.rank() != 0) {
    LoadOptions options;
    options.tensor_parallel_size = w.size();
    options.tensor_parallel_rank = w.rank();
    auto shard = load_model(config.model_dir, options);
    ASSERT_TRUE(shard) << shard.error().what();
    auto layout = shard->model.kv_layout(config.page_size);
    int pages = 0;
    auto followed = parallel::follow_tensor_parallel_leader(
        w, [&](int num_pages) -> Result<std::unique_ptr<model::ForwardBackend>> {
          pages = num_pages;
          return std::unique_ptr<model::ForwardBackend>(
              std::make_unique<model::CpuForwardBackend>(shard->model, layout, num_pages, 1, &w));
        });
    ASSERT_TRUE(followed) << followed.error().what();
    EXPECT_GT(pages, 0);
    return;
  }
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
  std::vector<std::int32_t> alone_ids;
  {
    Engine alone(runtime.executor(), config);
    alone_ids =
        test_support::collect(alone.submit(greedy("The whale", 12), boost::asio::use_future).get())
            .ids;
  }
  config.tensor_parallel = g_world;
  Engine split(runtime.executor(), config);
  // Two requests in one batch as well, so steps carry several sequences.
  auto a = split.submit(greedy("The whale", 12), boost::asio::use_future);
  auto b = split.submit(greedy("Call me Ishmael.", 8), boost::asio::use_future);
  const auto first = test_support::collect(a.get());
  const auto second = test_support::collect(b.get());
  EXPECT_EQ(first.error, "");
  EXPECT_EQ(first.ids, alone_ids);
  EXPECT_EQ(second.ids.size(), 8u);
  split.shutdown(boost::asio::use_future).get();
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  return weft::test_support::mpi_gtest_main(argc, argv, weft::g_world);
}
