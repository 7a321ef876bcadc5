// Run under `mpirun -np 2` (tests/actors/CMakeLists.txt): the Engine on rank 0 leading a
// two-stage pipeline (two micro-batches a step), rank 1 running the second stage, against the
// Engine alone.

#include <gtest/gtest.h>

#include <boost/asio/use_future.hpp>
#include <cstdio>

#include "actors/pipeline_stages.hpp"
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

TEST(PipelineEngine, GivesTheTokensOfOneProcess) {
  auto& w = *g_world;
  ASSERT_EQ(w.size(), 2) << "run under mpirun -np 2";
  EngineConfig config = test_support::tiny_config();
  config.cpu_threads = 1;
  config.micro_batches = 2;
  config.pp_groups = 1;  // one step at a time (pipeline_groups_engine_mpi_test: several)
  if (w.rank() != 0) {
    LoadOptions options;
    options.pipeline_parallel_size = 2;
    options.pipeline_stage = 1;
    auto stage = load_model(config.model_dir, options);
    ASSERT_TRUE(stage) << stage.error().what();
    EXPECT_GT(stage->model.first_layer(), 0);
    auto layout = stage->model.kv_layout(config.page_size);
    auto followed = parallel::follow_tensor_parallel_leader(
        w, [&](int num_pages) -> Result<std::unique_ptr<model::ForwardBackend>> {
          actors::StageOptions o;
          o.num_pages = num_pages;
          o.cpu_threads = 1;
          return actors::make_pipeline_rank_backend(stage->model, actors::DeviceChoice{}, layout, o,
                                                    w, parallel::pipeline_place(1, 1, 2), 2);
        });
    ASSERT_TRUE(followed) << followed.error().what();
    return;
  }
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
  std::vector<std::int32_t> alone_a, alone_b;
  {
    Engine alone(runtime.executor(), config);
    auto a = alone.submit(greedy("The whale", 12), boost::asio::use_future);
    auto b = alone.submit(greedy("Call me Ishmael.", 8), boost::asio::use_future);
    alone_a = test_support::collect(a.get()).ids;
    alone_b = test_support::collect(b.get()).ids;
  }
  config.tensor_parallel = g_world;
  config.pipeline_parallel = 2;
  Engine split(runtime.executor(), config);
  // Two requests in one batch: each step is cut into two micro-batches.
  auto a = split.submit(greedy("The whale", 12), boost::asio::use_future);
  auto b = split.submit(greedy("Call me Ishmael.", 8), boost::asio::use_future);
  const auto first = test_support::collect(a.get());
  const auto second = test_support::collect(b.get());
  EXPECT_EQ(first.error, "");
  EXPECT_EQ(first.ids, alone_a);
  EXPECT_EQ(second.ids, alone_b);
  split.shutdown(boost::asio::use_future).get();
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  return weft::test_support::mpi_gtest_main(argc, argv, weft::g_world);
}
