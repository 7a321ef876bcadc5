// The GPU/CPU hybrid (--cpu-layers, actors/pipeline_stages.hpp) and two GPU pipeline stages in
// one process against the model wholly on the GPU, on weft-tiny (8 layers): logits within the
// bf16 tolerance of cuda_model_test, and the same greedy tokens wherever the GPU's choice is
// not a near tie. Skips without a GPU (scripts/gpu-check runs it on the device machine).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "actors/pipeline_stages.hpp"
#include "kernels/cuda/device_info.hpp"
#include "loaders/model_loader.hpp"
#include "runtime/model/cuda/cuda_model.hpp"

namespace weft::actors {
namespace {

// bf16 on the GPU against fp32 on the CPU for the last layers: the GPU model's own bound
// against the CPU model (tests/runtime/model/cuda/cuda_model_test.cpp).
constexpr double kTolerance = 0.03;

double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  float max_ref = 0, max_err = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(want[i]));
    max_err = std::max(max_err, std::fabs(got[i] - want[i]));
  }
  if (!std::isfinite(max_err)) return 1e30;
  return max_ref > 0 ? max_err / max_ref : max_err;
}

// The argmax of the last row and its lead over the runner-up.
std::pair<int, float> greedy(const std::vector<float>& logits, int vocab) {
  const float* row = logits.data() + logits.size() - static_cast<std::size_t>(vocab);
  const int best = static_cast<int>(std::max_element(row, row + vocab) - row);
  float second = -INFINITY;
  for (int i = 0; i < vocab; ++i)
    if (i != best) second = std::max(second, row[i]);
  return {best, row[best] - second};
}

void compare(model::ForwardBackend& want_backend, model::ForwardBackend& got_backend,
             const std::string& what) {
  const int vocab = want_backend.spec().vocab_size;
  model::StepBatch step;
  step.tokens = {5, 17, 42, 99, 3, 201, 64};
  for (int i = 0; i < 7; ++i)
    step.positions.push_back(i);
  step.sequences.push_back({0, 7, {0, 1, 2, 3}, false});
  std::vector<float> want, got;
  for (int k = 0; k < 24; ++k) {
    ASSERT_TRUE(want_backend.forward(step, want));
    auto ok = got_backend.forward(step, got);
    ASSERT_TRUE(ok) << what << ": " << ok.error().what();
    ASSERT_EQ(got.size(), want.size());
    EXPECT_LE(relative_error(got, want), kTolerance) << what << " step " << k;
    const auto [best, margin] = greedy(want, vocab);
    float max_logit = 0;
    for (float v : want)
      max_logit = std::max(max_logit, std::fabs(v));
    if (margin > 4 * kTolerance * max_logit) {
      EXPECT_EQ(greedy(got, vocab).first, best) << what << " greedy token " << k;
    }
    const int pos = step.positions.back() + 1;
    step.tokens = {best};
    step.positions = {pos};
    step.sequences[0].token_begin = 0;
    step.sequences[0].token_count = 1;
  }
}

class GpuCpuHybrid : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto list = cuda::visible_devices();
    if (list.devices.empty()) {
      GTEST_SKIP() << "no GPU visible (" << list.unavailable_reason
                   << "): GPU checks run on the device machine through scripts/gpu-check";
    }
    const char* env = std::getenv("WEFT_TEST_SOURCE_DIR");
    const std::filesystem::path source = env != nullptr && *env != '\0' ? env : WEFT_SOURCE_DIR;
    auto m = load_model(source / "models/weft-tiny");
    ASSERT_TRUE(m) << m.error().what();
    loaded_ = std::make_unique<LoadedModel>(std::move(m.value()));
    layout_ = loaded_->model.kv_layout(16);
    layout_.dtype = KvDtype::kBF16;
    options_.num_pages = 8;
    options_.cpu_threads = 2;
    options_.max_tokens_per_step = 64;
  }
  std::unique_ptr<LoadedModel> loaded_;
  model::KvLayout layout_;
  StageOptions options_;
};

TEST_F(GpuCpuHybrid, TwoCpuLayersGiveTheTokensOfTheWholeGpu) {
  const DeviceChoice gpu{true, 0};
  auto whole = make_forward_backend(loaded_->model, gpu, layout_, 8, 2, 64);
  ASSERT_TRUE(whole) << whole.error().what();
  auto hybrid = make_gpu_cpu_hybrid(loaded_->model, gpu, layout_, options_, 2);
  ASSERT_TRUE(hybrid) << hybrid.error().what();
  EXPECT_EQ((*hybrid)->num_pages(), 8);
  compare(**whole, **hybrid, "--cpu-layers 2");
}

TEST_F(GpuCpuHybrid, TwoGpuStagesInOneProcessMatchTheWholeGpu) {
  const DeviceChoice gpu{true, 0};
  auto whole = make_forward_backend(loaded_->model, gpu, layout_, 8, 2, 64);
  ASSERT_TRUE(whole) << whole.error().what();
  const int L = loaded_->model.spec().num_layers;
  std::vector<std::unique_ptr<model::StageForward>> stages;
  for (const model::LayerRange r :
       {model::LayerRange{0, L / 2}, model::LayerRange{L / 2, L - L / 2}}) {
    auto stage = make_stage(loaded_->model, r, gpu, layout_, options_);
    ASSERT_TRUE(stage) << stage.error().what();
    stages.push_back(std::move(stage.value()));
  }
  auto pipeline = model::LayerPipeline::create(std::move(stages));
  ASSERT_TRUE(pipeline) << pipeline.error().what();
  compare(**whole, **pipeline, "two GPU stages");
}

TEST_F(GpuCpuHybrid, APartialGpuModelRefusesTheWholeForward) {
  model::CudaModelOptions o;
  o.num_pages = 4;
  o.layers = {0, 2};
  auto partial = model::CudaModel::create(loaded_->model, o);
  ASSERT_TRUE(partial) << partial.error().what();
  model::StepBatch step;
  step.tokens = {5};
  step.positions = {0};
  step.sequences.push_back({0, 1, {0}, false});
  std::vector<float> logits;
  auto bad = partial->forward(step, logits);
  ASSERT_FALSE(bad);
  EXPECT_NE(std::string(bad.error().what()).find("runs through forward_layers"), std::string::npos);
  // Its first layers hand on the residual stream.
  ASSERT_TRUE(partial->forward_layers(step, {}, logits));
  EXPECT_EQ(logits.size(), static_cast<std::size_t>(loaded_->model.spec().hidden_size));
}

}  // namespace
}  // namespace weft::actors
