// The CUDA model with int8 and fp8 (e4m3) KV pages: the same logits as the CPU model with the
// same KV type on weft-tiny (prefill in chunks, then decode past the split kernel's 64
// positions), and a pool of about twice the pages of bf16 in the same memory. Skips without a
// GPU.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <random>

#include "kernels/cuda/device_info.hpp"
#include "loaders/model_loader.hpp"
#include "runtime/model/cuda/cuda_model.hpp"

namespace weft {
namespace {

using model::CudaModel;
using model::CudaModelOptions;
using model::StepBatch;

// The checkout's weft-tiny, or WEFT_TEST_SOURCE_DIR's where the binary runs from another
// checkout (scripts/gpu-check on the device machine).
std::filesystem::path tiny_dir() {
  const char* env = std::getenv("WEFT_TEST_SOURCE_DIR");
  const std::filesystem::path source = env != nullptr && *env != '\0' ? env : WEFT_SOURCE_DIR;
  return source / "models/weft-tiny";
}

bool have_gpu() {
  return !cuda::visible_devices().devices.empty();
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

CudaModel make(const model::Model& cpu, KvDtype dtype, int pages, double fraction = 0.9) {
  CudaModelOptions o;
  o.page_size = 16;
  o.num_pages = pages;
  o.gpu_memory_fraction = fraction;
  o.max_tokens_per_step = 320;
  o.kv_dtype = dtype;
  auto m = CudaModel::create(cpu, o);
  if (!m) throw m.error();
  return std::move(m.value());
}

// The GPU rounds weights and activations to bf16 (cuda_model_test's bound, 0.03), the CPU
// keeps them fp32; both quantize K and V the same way, bitwise (cuda_kv_quant_test).
TEST(CudaKvQuantModel, AgreesWithTheCpuModelWithTheSameKvType) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto loaded = load_model(tiny_dir());
  ASSERT_TRUE(loaded) << loaded.error().what();
  const auto& cpu = loaded->model;
  const int vocab = cpu.spec().vocab_size;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> dist(0, vocab - 1);
  std::vector<int> prompt(700);
  for (auto& t : prompt)
    t = dist(rng);
  for (KvDtype dtype : {KvDtype::kInt8, KvDtype::kFp8E4M3}) {
    CudaModel gpu = make(cpu, dtype, 64);
    EXPECT_EQ(gpu.kv_layout().dtype, dtype);
    auto layout = cpu.kv_layout(16);
    layout.dtype = dtype;
    model::KvCache kv(layout, 64);
    cpu::ThreadPool pool(8);
    std::vector<std::int32_t> table;
    while (static_cast<int>(table.size()) < gpu.pages_for(720))
      table.push_back(*gpu.allocate_page());
    double worst = 0;
    int mismatches = 0, rows = 0;
    auto run_both = [&](const StepBatch& step, const std::string& what) {
      std::vector<float> g, c;
      auto ok = gpu.forward(step, g);
      ASSERT_TRUE(ok) << ok.error().what();
      ok = cpu.forward(step, kv, c, pool);
      ASSERT_TRUE(ok) << ok.error().what();
      ASSERT_EQ(g.size(), c.size());
      for (std::size_t r = 0; r < g.size() / vocab; ++r, ++rows) {
        const double e = relative_error(g.data() + r * vocab, c.data() + r * vocab, vocab);
        worst = std::max(worst, e);
        EXPECT_LE(e, 0.04) << kv_dtype_name(dtype) << " " << what << " row " << r;
        const auto* gr = g.data() + r * vocab;
        const auto* cr = c.data() + r * vocab;
        mismatches +=
            std::max_element(gr, gr + vocab) - gr != std::max_element(cr, cr + vocab) - cr;
      }
    };
    for (int begin = 0; begin < 700; begin += 300) {
      const int end = std::min(700, begin + 300);
      StepBatch step;
      for (int i = begin; i < end; ++i) {
        step.tokens.push_back(prompt[static_cast<std::size_t>(i)]);
        step.positions.push_back(i);
      }
      step.sequences.push_back({0, end - begin, table, true});
      run_both(step, "prefill chunk at " + std::to_string(begin));
    }
    for (int pos = 700; pos < 712; ++pos) {
      StepBatch step;
      step.tokens = {prompt[static_cast<std::size_t>(pos - 600)]};
      step.positions = {pos};
      step.sequences.push_back({0, 1, table, false});
      run_both(step, "decode at " + std::to_string(pos));
    }
    std::cout << "[ measured ] weft-tiny " << kv_dtype_name(dtype)
              << " KV: GPU vs CPU worst relative logit error " << worst << ", argmax differs on "
              << mismatches << " of " << rows << " rows\n";
    EXPECT_LE(mismatches, rows / 20);
  }
}

// Sized from the same fraction of the device, int8 and fp8 pools hold about 1.9x the pages
// of bf16 (weft-tiny: head_dim 64, so 4 bytes of scale per 64 bytes of row: 128 / 68).
TEST(CudaKvQuantModel, PoolHoldsAboutTwiceTheTokensOfBf16) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto loaded = load_model(tiny_dir());
  ASSERT_TRUE(loaded) << loaded.error().what();
  // The fraction leaves about 2 GiB for the pool above what the device already holds (other
  // processes, and what earlier tests of this one keep cached), so the pool's size is set by
  // the KV type, not by what else is on the device.
  std::size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  const double fraction =
      std::min(0.95, static_cast<double>(total_bytes - free_bytes + (std::size_t{2} << 30)) /
                         static_cast<double>(total_bytes));
  int bf16_pages = 0;
  {
    CudaModel gpu = make(loaded->model, KvDtype::kBF16, 0, fraction);
    bf16_pages = gpu.num_pages();
  }
  for (KvDtype dtype : {KvDtype::kInt8, KvDtype::kFp8E4M3}) {
    CudaModel gpu = make(loaded->model, dtype, 0, fraction);
    const double ratio = static_cast<double>(gpu.num_pages()) / bf16_pages;
    std::cout << "[ measured ] " << kv_dtype_name(dtype) << " pool " << gpu.num_pages()
              << " pages vs bf16 " << bf16_pages << " (" << ratio << "x)\n";
    EXPECT_NEAR(ratio, 128.0 / 68.0, 0.03);
  }
}

TEST(CudaKvQuantModel, RefusesF32Pages) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto loaded = load_model(tiny_dir());
  ASSERT_TRUE(loaded) << loaded.error().what();
  CudaModelOptions o;
  o.num_pages = 4;
  o.kv_dtype = KvDtype::kF32;
  auto m = CudaModel::create(loaded->model, o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(std::string(m.error().what()).find("f32"), std::string::npos) << m.error().what();
}

}  // namespace
}  // namespace weft
