// Run under `mpirun -np 2` (tests/actors/CMakeLists.txt): the Engine on rank 0 leading a
// two-stage pipeline with sequence groups in flight (EngineConfig::pp_groups, docs/parallel.md),
// rank 1 running the second stage, against the Engine alone: the same greedy tokens for every
// request (of different lengths, submitted together, constrained or not), a request cancelled
// mid-stream, and every KV page given back.

#include <gtest/gtest.h>

#include <boost/asio/use_future.hpp>
#include <cstdio>
#include <string>
#include <vector>

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

// Prompts of different lengths with different output budgets: the groups' steps differ in
// size, and requests end (and free their pages) while other groups' steps are in flight.
std::vector<GenerateRequest> mixed_requests() {
  const char* prompts[] = {"The whale",
                           "Call me Ishmael.",
                           "It was the best of times, it was the worst of times",
                           "A",
                           "Some years ago, never mind how long precisely, having little money",
                           "The sea"};
  const int lengths[] = {12, 5, 20, 9, 3, 16};
  std::vector<GenerateRequest> out;
  for (int i = 0; i < 6; ++i)
    out.push_back(greedy(prompts[i], lengths[i]));
  return out;
}

EngineConfig base_config() {
  EngineConfig config = test_support::tiny_config();
  config.cpu_threads = 1;
  return config;
}

// Rank 1: the second stage, following the leader's steps (point to point with groups).
void follow(const EngineConfig& config, int groups) {
  auto& w = *g_world;
  LoadOptions options;
  options.pipeline_parallel_size = 2;
  options.pipeline_stage = 1;
  auto stage = load_model(config.model_dir, options);
  ASSERT_TRUE(stage) << stage.error().what();
  auto layout = stage->model.kv_layout(config.page_size);
  const int micro = config.micro_batches > 0 ? config.micro_batches : 2;
  auto followed = parallel::follow_tensor_parallel_leader(
      w,
      [&](int num_pages) -> Result<std::unique_ptr<model::ForwardBackend>> {
        actors::StageOptions o;
        o.num_pages = num_pages;
        o.cpu_threads = 1;
        return actors::make_pipeline_rank_backend(stage->model, actors::DeviceChoice{}, layout, o,
                                                  w, parallel::pipeline_place(1, 1, 2), micro,
                                                  groups);
      },
      groups > 1);
  ASSERT_TRUE(followed) << followed.error().what();
}

std::vector<test_support::Collected> run_all(Engine& engine,
                                             const std::vector<GenerateRequest>& requests) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& r : requests)
    streams.push_back(engine.submit(r, boost::asio::use_future).get());
  std::vector<test_support::Collected> out;
  for (auto& s : streams)
    out.push_back(test_support::collect(s));
  return out;
}

class PipelineGroups : public ::testing::Test {
 protected:
  // The requests' greedy tokens from the Engine alone (rank 0 only).
  std::vector<std::vector<std::int32_t>> alone(const std::vector<GenerateRequest>& requests) {
    Engine engine(runtime.executor(), base_config());
    std::vector<std::vector<std::int32_t>> ids;
    for (const auto& c : run_all(engine, requests)) {
      EXPECT_EQ(c.error, "");
      ids.push_back(c.ids);
    }
    engine.shutdown(boost::asio::use_future).get();
    return ids;
  }
  EngineConfig split_config(int groups) {
    EngineConfig config = base_config();
    config.tensor_parallel = g_world;
    config.pipeline_parallel = 2;
    config.pp_groups = groups;
    return config;
  }
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
};

TEST_F(PipelineGroups, TwoGroupsGiveTheTokensOfOneProcess) {
  ASSERT_EQ(g_world->size(), 2) << "run under mpirun -np 2";
  if (g_world->rank() != 0) return follow(base_config(), 2);
  const auto requests = mixed_requests();
  const auto expected = alone(requests);
  Engine split(runtime.executor(), split_config(2));
  const auto got = run_all(split, requests);
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].error, "") << "request " << i;
    EXPECT_EQ(got[i].reason, FinishReason::kLength) << "request " << i;
    EXPECT_EQ(got[i].ids, expected[i]) << "request " << i;
    EXPECT_EQ(static_cast<int>(got[i].ids.size()), requests[i].sampling.max_tokens);
  }
  const EngineMetrics m = split.metrics(boost::asio::use_future).get();
  EXPECT_EQ(m.steps_in_flight_peak, 2) << "the two groups' steps were never in flight together";
  EXPECT_EQ(m.kv_pages_used, 0) << "pages not freed";
  EXPECT_EQ(m.running, 0);
  EXPECT_EQ(m.finished_length, requests.size());
  EXPECT_EQ(m.finished_error, 0u);
  split.shutdown(boost::asio::use_future).get();
}

TEST_F(PipelineGroups, ThreeGroupsOverTwoStagesWithOneMicroBatch) {
  ASSERT_EQ(g_world->size(), 2) << "run under mpirun -np 2";
  EngineConfig follower = base_config();
  follower.micro_batches = 1;
  if (g_world->rank() != 0) return follow(follower, 3);
  const auto requests = mixed_requests();
  const auto expected = alone(requests);
  EngineConfig config = split_config(3);
  config.micro_batches = 1;
  Engine split(runtime.executor(), config);
  const auto got = run_all(split, requests);
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(got[i].ids, expected[i]) << "request " << i;
  const EngineMetrics m = split.metrics(boost::asio::use_future).get();
  EXPECT_EQ(m.steps_in_flight_peak, 3);
  EXPECT_EQ(m.kv_pages_used, 0) << "pages not freed";
  split.shutdown(boost::asio::use_future).get();
}

TEST_F(PipelineGroups, CancelMidStreamLeavesTheOthersExact) {
  ASSERT_EQ(g_world->size(), 2) << "run under mpirun -np 2";
  if (g_world->rank() != 0) return follow(base_config(), 2);
  std::vector<GenerateRequest> requests;
  for (const char* p : {"The whale", "Call me Ishmael.", "The sea was calm", "A ship"})
    requests.push_back(greedy(p, 64));
  // Run after the cancel: pages the cancelled request gave back are written again.
  const GenerateRequest after = greedy("It was the best of times", 10);
  auto all = requests;
  all.push_back(after);
  const auto expected = alone(all);

  Engine split(runtime.executor(), split_config(2));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& r : requests)
    streams.push_back(split.submit(r, boost::asio::use_future).get());
  // Read a few deltas of request 1, then cancel it while every group has steps to run.
  std::vector<std::int32_t> partial;
  while (partial.size() < 3) {
    Event e = streams[1]->next(boost::asio::use_future).get();
    ASSERT_NE(e.kind, Event::Kind::kFinal) << "request 1 ended early: " << e.error;
    partial.insert(partial.end(), e.token_ids.begin(), e.token_ids.end());
  }
  split.cancel(streams[1]->id());
  const auto cancelled = test_support::collect(streams[1]);
  EXPECT_EQ(cancelled.reason, FinishReason::kCancelled);
  partial.insert(partial.end(), cancelled.ids.begin(), cancelled.ids.end());
  ASSERT_LT(partial.size(), expected[1].size()) << "the cancel came after the last token";
  EXPECT_TRUE(std::equal(partial.begin(), partial.end(), expected[1].begin()))
      << "the cancelled request's tokens are not a prefix of its tokens alone";
  for (std::size_t i : {0u, 2u, 3u}) {
    const auto c = test_support::collect(streams[i]);
    EXPECT_EQ(c.reason, FinishReason::kLength) << "request " << i;
    EXPECT_EQ(c.ids, expected[i]) << "request " << i;
  }
  const auto later = run_all(split, {after});
  EXPECT_EQ(later[0].ids, expected[4]);
  const EngineMetrics m = split.metrics(boost::asio::use_future).get();
  EXPECT_EQ(m.finished_cancelled, 1u);
  EXPECT_EQ(m.steps_in_flight_peak, 2);
  EXPECT_EQ(m.kv_pages_used, 0) << "pages not freed";
  split.shutdown(boost::asio::use_future).get();
}

TEST_F(PipelineGroups, ConstrainedRequestsBesidePlainOnes) {
  ASSERT_EQ(g_world->size(), 2) << "run under mpirun -np 2";
  if (g_world->rank() != 0) return follow(base_config(), 2);
  std::vector<GenerateRequest> requests = mixed_requests();
  for (const char* source : {"(yes|no|maybe)", "[a-z]{3,12}", "[0-9]+(\\.[0-9]+)?"}) {
    GenerateRequest r = greedy("The answer is", 16);
    r.sampling.ignore_eos = false;
    ResponseFormat f;
    f.type = ResponseFormat::Type::kRegex;
    f.source = source;
    r.response_format = f;
    requests.push_back(std::move(r));
  }
  const auto expected = alone(requests);
  Engine split(runtime.executor(), split_config(2));
  const auto got = run_all(split, requests);
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].error, "") << "request " << i;
    EXPECT_EQ(got[i].ids, expected[i]) << "request " << i;
  }
  const EngineMetrics m = split.metrics(boost::asio::use_future).get();
  EXPECT_GT(m.constrained_steps, 0u);
  EXPECT_EQ(m.steps_in_flight_peak, 2);
  EXPECT_EQ(m.kv_pages_used, 0) << "pages not freed";
  split.shutdown(boost::asio::use_future).get();
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  return weft::test_support::mpi_gtest_main(argc, argv, weft::g_world);
}
