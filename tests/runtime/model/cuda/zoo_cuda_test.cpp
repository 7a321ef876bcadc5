// The zoo families on the GPU: the CUDA model against the CPU model on the in-memory
// checkpoints of zoo_models.hpp (always), and against transformers' logits on the fixtures of
// tests/fixtures/zoo (when made). Both skip without a GPU.
//
//   scripts/gpu-check --stage && run(scripts/gpu-check --run --gtest_filter='*Zoo*')

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/device_info.hpp"
#include "loaders/model_loader.hpp"
#include "runtime/model/cuda/cuda_model.hpp"
#include "tests/runtime/model/zoo_fixture.hpp"
#include "tests/runtime/model/zoo_models.hpp"

namespace weft {
namespace {

using cuda::Precision;
namespace zoo = testing::zoo;

// As cuda_model_test: max |got - want| / max |want| over a row; the GPU rounds weights and
// activations between kernels to 16 bits.
double tolerance(Precision p) {
  return p == Precision::kBF16 ? 0.03 : 0.004;
}

double relative_error(const float* got, const float* want, std::size_t n) {
  float max_ref = 0.0f, max_err = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    max_ref = std::max(max_ref, std::fabs(want[i]));
    max_err = std::max(max_err, std::fabs(got[i] - want[i]));
  }
  if (!std::isfinite(max_err)) return 1e30;
  return max_ref > 0 ? max_err / max_ref : max_err;
}

#define SKIP_WITHOUT_GPU()                                                                 \
  do {                                                                                     \
    const auto list = cuda::visible_devices();                                             \
    if (list.devices.empty()) {                                                            \
      GTEST_SKIP() << "no GPU visible (" << list.unavailable_reason                        \
                   << "): GPU checks run on the device machine through scripts/gpu-check"; \
    }                                                                                      \
  } while (0)

model::CudaModel make(const model::Model& cpu, Precision p, int page_size) {
  model::CudaModelOptions o;
  o.precision = p;
  o.page_size = page_size;
  o.num_pages = 64;
  o.max_tokens_per_step = 32;
  auto m = model::CudaModel::create(cpu, o);
  if (!m) throw m.error();
  return std::move(m.value());
}

// Prefills `prompt` (all logits), then decodes `continuation` one token at a time; returns
// every logit row: the prompt's, then one per decode step.
std::vector<float> run_gpu(model::CudaModel& gpu, const std::vector<int>& prompt,
                           const std::vector<int>& continuation) {
  const int len = static_cast<int>(prompt.size());
  model::StepBatch step;
  step.tokens = prompt;
  for (int i = 0; i < len; ++i)
    step.positions.push_back(i);
  model::SequenceSlice seq{0, len, {}, true};
  const int total = len + static_cast<int>(continuation.size());
  while (static_cast<int>(seq.page_table.size()) < gpu.pages_for(total))
    seq.page_table.push_back(*gpu.allocate_page());
  step.sequences.push_back(seq);
  std::vector<float> logits, all;
  auto ok = gpu.forward(step, logits);
  if (!ok) throw ok.error();
  all = logits;
  for (std::size_t k = 0; k < continuation.size(); ++k) {
    step.tokens = {continuation[k]};
    step.positions = {len + static_cast<int>(k)};
    step.sequences[0].token_count = 1;
    step.sequences[0].all_logits = false;
    ok = gpu.forward(step, logits);
    if (!ok) throw ok.error();
    all.insert(all.end(), logits.begin(), logits.end());
  }
  for (auto page : step.sequences[0].page_table)
    gpu.release_page(page);
  return all;
}

class ZooCuda : public ::testing::TestWithParam<zoo::Case> {};

// Every block on the GPU against the CPU forward (itself checked against the reference in
// zoo_blocks_test), prefill and decode, both precisions, page sizes 1 and 4.
TEST_P(ZooCuda, GpuMatchesTheCpuModel) {
  SKIP_WITHOUT_GPU();
  const zoo::Case c = GetParam();
  zoo::Dims d;
  if (c.family == zoo::Family::kGemma) d.head_dim = 8;
  const auto b = zoo::build(c, d);
  const std::vector<int> prompt{3, 17, 0, 29, 8}, continuation{8, 21, 5, 30, 1, 2};
  // The CPU rows, computed the same way (one prefill, then one token per step).
  std::vector<float> want;
  {
    cpu::ThreadPool pool(2);
    model::KvCache kv(b.model.kv_layout(4), 16);
    model::SequenceSlice seq{0, 5, {}, true};
    for (int p = 0; p < kv.pages_for(11); ++p)
      seq.page_table.push_back(*kv.allocate_page());
    model::StepBatch step{prompt, {0, 1, 2, 3, 4}, {seq}};
    std::vector<float> logits;
    ASSERT_TRUE(b.model.forward(step, kv, logits, pool));
    want = logits;
    for (std::size_t k = 0; k < continuation.size(); ++k) {
      step.tokens = {continuation[k]};
      step.positions = {5 + static_cast<int>(k)};
      step.sequences[0].token_count = 1;
      step.sequences[0].all_logits = false;
      ASSERT_TRUE(b.model.forward(step, kv, logits, pool));
      want.insert(want.end(), logits.begin(), logits.end());
    }
  }
  for (Precision p : {Precision::kF16, Precision::kBF16}) {
    for (int page_size : {1, 4}) {
      auto gpu = make(b.model, p, page_size);
      const auto got = run_gpu(gpu, prompt, continuation);
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t r = 0; r * d.vocab < got.size(); ++r) {
        EXPECT_LE(relative_error(got.data() + r * d.vocab, want.data() + r * d.vocab,
                                 static_cast<std::size_t>(d.vocab)),
                  tolerance(p))
            << c.name << " " << cuda::precision_name(p) << " page_size " << page_size << " row "
            << r;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ZooCuda, ::testing::ValuesIn(zoo::cases()),
                         [](const auto& param) { return std::string(param.param.name); });

class ZooCudaFixture : public ::testing::TestWithParam<std::string> {};

// Against transformers: the prompt's rows and each teacher-forced decode step within the
// precision's tolerance, the greedy tokens where the reference's margin exceeds what that
// tolerance could flip.
TEST_P(ZooCudaFixture, GpuMatchesTransformers) {
  SKIP_WITHOUT_GPU();
  const auto dir = zoo::fixture_dir(GetParam());
  if (!std::filesystem::exists(dir / "reference.json")) {
    GTEST_SKIP() << dir.string() << " is absent: make the zoo fixtures with: " << zoo::kMakeCommand;
  }
  auto loaded = load_model(dir);
  ASSERT_TRUE(loaded) << loaded.error().what();
  const auto ref = zoo::read_zoo_reference(dir);
  const int V = loaded->model.spec().vocab_size;
  std::vector<int> fed(ref.greedy_ids.begin(), ref.greedy_ids.end() - 1);
  for (Precision p : {Precision::kF16, Precision::kBF16}) {
    auto gpu = make(loaded->model, p, 4);
    const auto got = run_gpu(gpu, ref.prompt_ids, fed);
    const double tol = tolerance(p);
    const std::size_t len = ref.prompt_ids.size();
    for (std::size_t t = 0; t < len; ++t) {
      EXPECT_LE(relative_error(got.data() + t * V, ref.prompt_logits[t].data(),
                               static_cast<std::size_t>(V)),
                tol)
          << GetParam() << " " << cuda::precision_name(p) << " prompt row " << t;
    }
    float max_logit = 0;
    for (const auto& row : ref.step_logits)
      for (float v : row)
        max_logit = std::max(max_logit, std::fabs(v));
    for (std::size_t k = 0; k < ref.greedy_ids.size(); ++k) {
      const float* row = got.data() + (len - 1 + k) * V;
      EXPECT_LE(relative_error(row, ref.step_logits[k].data(), static_cast<std::size_t>(V)), tol)
          << GetParam() << " " << cuda::precision_name(p) << " step " << k;
      if (ref.greedy_margins[k] <= 4 * tol * max_logit) break;  // first near-tie at this precision
      EXPECT_EQ(static_cast<int>(std::max_element(row, row + V) - row), ref.greedy_ids[k])
          << GetParam() << " " << cuda::precision_name(p) << " greedy token " << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Zoo, ZooCudaFixture, ::testing::ValuesIn(zoo::fixture_names()),
                         [](const auto& param) { return param.param; });

}  // namespace
}  // namespace weft
