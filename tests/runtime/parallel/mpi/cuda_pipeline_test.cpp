// Run under `mpirun -np 2` (tests/runtime/CMakeLists.txt): every fixture model cut into two GPU
// pipeline stages, one per rank, against the whole model on one GPU.
//  - TwoGpus (two GPUs or more): rank r on GPU r, the stages joined over NCCL
//    (nccl_pipeline.hpp: the residual stream and the logits device to device), two
//    micro-batches in flight on each step (WEFT_PP_MICRO_TOKENS=1 lets a piece be small).
//  - OneGpu (one GPU or more): both ranks on GPU 0. NCCL takes one rank per GPU, so the stages
//    agree on the host path (MPI), which must give the same tokens.
// Skips with a message where there are fewer GPUs. Each rank runs the whole model on its own
// GPU as the reference; both are fed the whole model's greedy tokens. Each step runs twice on
// the pipeline: forward() (logits to rank 0's host), then launch() and the GPU sampler on rank 0
// (logits left on its GPU), which must pick the same greedy tokens.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "loaders/model_loader.hpp"
#include "runtime/model/cuda/cuda_model.hpp"
#include "runtime/parallel/mpi_communicator.hpp"
#include "runtime/parallel/nccl_pipeline.hpp"
#include "runtime/parallel/pipeline_backend.hpp"
#include "tests/runtime/parallel/mpi/mpi_gtest_main.hpp"

namespace weft {
namespace {

parallel::Communicator* g_world = nullptr;

std::filesystem::path source_dir() {
  if (const char* env = std::getenv("WEFT_TEST_SOURCE_DIR"); env != nullptr && *env != '\0') {
    return env;
  }
  return WEFT_SOURCE_DIR;
}

// A CudaModel holding a layer range, as actors/pipeline_stages.cpp's CudaStage (no tensor
// parallelism here).
class GpuStage final : public model::StageForward {
 public:
  explicit GpuStage(model::CudaModel gpu) : gpu_(std::move(gpu)) {}
  const model::ModelSpec& spec() const noexcept override { return gpu_.spec(); }
  model::LayerRange layers() const noexcept override { return gpu_.layers(); }
  int num_pages() const noexcept override { return gpu_.num_pages(); }
  int page_size() const noexcept override { return gpu_.kv_layout().page_size; }
  Result<void> forward(const model::StepBatch& batch, std::span<const float> hidden_in,
                       std::vector<float>& out, parallel::Communicator*) override {
    return gpu_.forward_layers(batch, hidden_in, out);
  }
  int cuda_device() const noexcept override { return gpu_.device(); }
  void* cuda_stream() const noexcept override { return gpu_.cuda_stream(); }
  Result<void> enqueue(const model::StepBatch& batch, const float* hidden_in, float* out,
                       parallel::Communicator*) override {
    return gpu_.enqueue_layers(batch, hidden_in, out);
  }
  bool samples_on_device() const noexcept override { return true; }
  Result<void> adopt_logits(const float* logits, int rows) override {
    return gpu_.adopt_logits(logits, rows);
  }
  Result<void> sample(const model::DeviceSamplingInput& input,
                      model::DeviceSamplingOutput& output) override {
    return gpu_.sample(input, output);
  }

 private:
  model::CudaModel gpu_;
};

enum Mode { kTwoGpus = 0, kOneGpu = 1 };

class CudaPipeline : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(CudaPipeline, TwoStagesMatchOneGpu) {
  auto& w = *g_world;
  const auto& [name, mode] = GetParam();
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) {
    cudaGetLastError();
    gpus = 0;
  }
  const int need = mode == kTwoGpus ? 2 : 1;
  if (gpus < need || w.size() != 2) {
    GTEST_SKIP() << "needs " << need << " GPU(s) and mpirun -np 2 (have " << gpus << " GPUs, "
                 << w.size() << " ranks): run on a GPU machine (bench/device/ppnccl.sh)";
  }
  const int device = mode == kTwoGpus ? w.rank() : 0;
  const auto dir = source_dir() / "tests/fixtures/models" / name;
  auto whole = load_model(dir);
  ASSERT_TRUE(whole) << whole.error().what();
  LoadOptions options;
  options.pipeline_parallel_size = w.size();
  options.pipeline_stage = w.rank();
  auto part = load_model(dir, options);
  ASSERT_TRUE(part) << part.error().what();
  const int vocab = whole->model.spec().vocab_size;

  model::CudaModelOptions o;
  o.device = device;
  o.page_size = 4;
  o.num_pages = 16;
  o.max_tokens_per_step = 32;
  auto one = model::CudaModel::create(whole->model, o);
  ASSERT_TRUE(one) << one.error().what();
  o.layers = {part->model.first_layer(), part->model.layer_count()};
  auto gpu = model::CudaModel::create(part->model, o);
  ASSERT_TRUE(gpu) << gpu.error().what();
  auto backend = parallel::PipelineBackend::create(std::make_unique<GpuStage>(std::move(*gpu)), w,
                                                   parallel::pipeline_place(w.rank(), 1, w.size()),
                                                   2, parallel::make_nccl_stage_links);
  ASSERT_TRUE(backend) << backend.error().what();

  // Two sequences, so each step is cut into two micro-batches; then decode steps of both,
  // which the stages replay as CUDA graphs.
  model::StepBatch step;
  step.tokens = {5, 17, 42, 99, 3, 201, 64, 8, 9, 10};
  step.positions = {0, 1, 2, 3, 4, 5, 6, 0, 1, 2};
  step.sequences.push_back({0, 7, {0, 1, 2, 3}, true});
  step.sequences.push_back({7, 3, {4, 5, 6, 7}, false});
  std::vector<float> want, got;
  for (int s = 0; s < 6; ++s) {
    ASSERT_TRUE(one->forward(step, want));
    auto ok = (*backend)->forward(step, got);
    ASSERT_TRUE(ok) << ok.error().what();
    if (s == 0) {
      const std::string how = (*backend)->transport();
      EXPECT_NE(how.find(mode == kTwoGpus ? "NCCL" : "host"), std::string::npos) << how;
    }
    if (w.rank() != 0) {
      EXPECT_TRUE(got.empty());  // only rank 0 gets the logits
    } else {
      ASSERT_EQ(got.size(), want.size());
      float max_ref = 0, max_err = 0;
      for (std::size_t i = 0; i < want.size(); ++i) {
        max_ref = std::max(max_ref, std::fabs(want[i]));
        max_err = std::max(max_err, std::fabs(got[i] - want[i]));
      }
      // The same kernels; a micro-batch's products over fewer rows may block their sums
      // otherwise (the GPU model tests' bf16 bound).
      EXPECT_LE(max_err, 0.03f * max_ref) << name << " step " << s;
    }
    // The same step again through launch() and the GPU sampler on rank 0 (its KV writes are
    // the same values again): greedy picks of both sequences' last rows.
    EXPECT_EQ((*backend)->samples_on_device(), w.rank() == 0);
    std::vector<std::int32_t> sampled;
    if (w.rank() == 0) {
      auto launched = (*backend)->launch(step);
      ASSERT_TRUE(launched) << launched.error().what();
      model::DeviceSamplingInput in;
      const int rows = step.logit_rows();
      for (int r = rows - 2; r < rows; ++r) {
        sampling::DeviceSampleRow row;
        row.row = r;
        in.rows.push_back(row);
      }
      model::DeviceSamplingOutput out;
      auto picked = (*backend)->sample(in, out);
      ASSERT_TRUE(picked) << picked.error().what();
      for (const auto& res : out.results)
        sampled.push_back(res.token);
    } else {
      ASSERT_TRUE((*backend)->forward(step, got));  // the follower runs its stage again
    }
    std::vector<std::int32_t> next;
    for (int seq = 0; seq < 2; ++seq) {
      const float* row = want.data() + want.size() - static_cast<std::size_t>(2 - seq) * vocab;
      const auto best = static_cast<std::int32_t>(std::max_element(row, row + vocab) - row);
      if (w.rank() == 0) {
        const float* mine = got.data() + got.size() - static_cast<std::size_t>(2 - seq) * vocab;
        EXPECT_EQ(std::max_element(mine, mine + vocab) - mine, best) << name << " step " << s;
        EXPECT_EQ(sampled[static_cast<std::size_t>(seq)], best) << name << " step " << s;
      }
      next.push_back(best);
    }
    const int p0 = step.positions[static_cast<std::size_t>(step.sequences[0].token_begin +
                                                           step.sequences[0].token_count - 1)] +
                   1;
    const int p1 = step.positions.back() + 1;
    step.tokens = next;
    step.positions = {p0, p1};
    step.sequences[0] = {0, 1, {0, 1, 2, 3}, false};
    step.sequences[1] = {1, 1, {4, 5, 6, 7}, false};
  }
  backend->reset();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaPipeline,
                         ::testing::Combine(::testing::Values("llama_gqa_f32",
                                                              "llama_mqa_tied_llama3_bf16",
                                                              "mistral_swa_bf16", "qwen2_tied_f32"),
                                            ::testing::Values(kTwoGpus, kOneGpu)));

// The choice of path, with CPU stages (no GPU needed): a stage without a GPU cannot use NCCL,
// so every rank agrees on the host path, or fails alike when NCCL is demanded; an unknown
// WEFT_PP_TRANSPORT is refused, naming the accepted values. Then a pipeline of CPU stages given
// the NCCL factory runs through host memory and says so.
TEST(CudaPipelineTransport, AgreesOnThePathAndRefusesUnknownChoices) {
  auto& w = *g_world;
  const auto dir = source_dir() / "tests/fixtures/models/llama_gqa_f32";
  LoadOptions options;
  options.pipeline_parallel_size = w.size();
  options.pipeline_stage = w.rank();
  auto part = load_model(dir, options);
  ASSERT_TRUE(part) << part.error().what();
  const model::LayerRange layers{part->model.first_layer(), part->model.layer_count()};
  const auto place = parallel::pipeline_place(w.rank(), 1, w.size());
  model::CpuStage stage(part->model, layers, part->model.kv_layout(4), 4, 1);
  auto links = parallel::make_nccl_stage_links(w, place, stage);
  ASSERT_TRUE(links) << links.error().what();
  EXPECT_EQ(links->get(), nullptr);  // the host path
  setenv("WEFT_PP_TRANSPORT", "nccl", 1);
  links = parallel::make_nccl_stage_links(w, place, stage);
  ASSERT_FALSE(links);
  EXPECT_NE(std::string(links.error().what()).find("cannot use NCCL"), std::string::npos)
      << links.error().what();
  setenv("WEFT_PP_TRANSPORT", "carrier-pigeon", 1);
  links = parallel::make_nccl_stage_links(w, place, stage);
  unsetenv("WEFT_PP_TRANSPORT");
  ASSERT_FALSE(links);
  EXPECT_NE(std::string(links.error().what()).find("expected auto, host or nccl"),
            std::string::npos)
      << links.error().what();

  auto backend = parallel::PipelineBackend::create(
      std::make_unique<model::CpuStage>(part->model, layers, part->model.kv_layout(4), 4, 1), w,
      place, 2, parallel::make_nccl_stage_links);
  ASSERT_TRUE(backend) << backend.error().what();
  EXPECT_FALSE((*backend)->samples_on_device());
  model::StepBatch step;
  step.tokens = {5, 17, 42};
  step.positions = {0, 1, 2};
  step.sequences.push_back({0, 3, {0}, true});
  std::vector<float> got;
  auto ok = (*backend)->forward(step, got);
  ASSERT_TRUE(ok) << ok.error().what();
  EXPECT_EQ(got.size(), w.rank() == 0 ? 3u * part->model.spec().vocab_size : 0u);
  EXPECT_NE((*backend)->transport().find("host buffers"), std::string::npos)
      << (*backend)->transport();
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  setenv("WEFT_PP_MICRO_TOKENS", "1", 1);  // two micro-batches even in decode steps
  return weft::test_support::mpi_gtest_main(argc, argv, weft::g_world);
}
