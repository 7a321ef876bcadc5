// The executor actor with a GPU backend (CudaModel) answers a step like the CPU executor, and
// a bad step is an error reply. Skips without a GPU (scripts/gpu-check runs it on the device).

#include <gtest/gtest.h>

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <cmath>
#include <thread>

#include "actors/executor_actor.hpp"
#include "kernels/cuda/device_info.hpp"
#include "loaders/model_loader.hpp"
#include "runtime/model/cuda/cuda_model.hpp"

namespace weft {
namespace {

TEST(CudaExecutor, AnswersStepsLikeTheCpuExecutor) {
  const auto devices = cuda::visible_devices();
  if (devices.devices.empty()) {
    GTEST_SKIP() << "no GPU visible (" << devices.unavailable_reason
                 << "): GPU checks run on the device machine through scripts/gpu-check";
  }
  const char* env = std::getenv("WEFT_TEST_SOURCE_DIR");
  const std::filesystem::path source = env != nullptr && *env != '\0' ? env : WEFT_SOURCE_DIR;
  auto loaded = load_model(source / "models/weft-tiny");
  ASSERT_TRUE(loaded) << loaded.error().what();
  const auto& m = loaded->model;
  model::CudaModelOptions options;
  options.num_pages = 16;
  auto gpu = model::CudaModel::create(m, options);
  ASSERT_TRUE(gpu) << gpu.error().what();

  asio::io_context io;
  auto guard = asio::make_work_guard(io);
  std::thread worker([&] { io.run(); });
  {
    actors::ExecutorActor cpu_exec(io.get_executor(), m, m.kv_layout(16), 16, 2);
    actors::ExecutorActor gpu_exec(io.get_executor(),
                                   std::make_unique<model::CudaModel>(std::move(gpu.value())));
    model::StepBatch step;
    for (int i = 0; i < 20; ++i) {
      step.tokens.push_back(100 + 37 * i);
      step.positions.push_back(i);
    }
    step.sequences.push_back({0, 20, {0, 1}, false});
    const auto c = cpu_exec.run(step, asio::use_future).get();
    const auto g = gpu_exec.run(step, asio::use_future).get();
    ASSERT_EQ(g.rows, 1);
    ASSERT_EQ(g.vocab, m.spec().vocab_size);
    ASSERT_EQ(g.values.size(), c.values.size());
    float max_ref = 0, max_err = 0;
    for (std::size_t i = 0; i < c.values.size(); ++i) {
      max_ref = std::max(max_ref, std::fabs(c.values[i]));
      max_err = std::max(max_err, std::fabs(g.values[i] - c.values[i]));
    }
    EXPECT_LE(max_err, 0.03f * max_ref);  // the bf16 bound of cuda_model_test
    model::StepBatch bad{{999999}, {0}, {{0, 1, {0}, false}}};
    EXPECT_THROW(gpu_exec.run(bad, asio::use_future).get(), Error);
  }
  guard.reset();
  worker.join();
}

}  // namespace
}  // namespace weft
