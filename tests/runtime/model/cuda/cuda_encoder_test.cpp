// The encoder on a GPU (model::CudaEncoder) against transformers: last hidden states and pooled
// vectors of tests/fixtures/bert/{bert,roberta}_tiny (made by tests/fixtures/bert/
// make_fixtures.py), every case alone and all of them batched into one forward pass of
// sequences of different lengths, in bf16 and fp16. Tolerances (absolute, on hidden states of
// unit variance): 6e-2 in bf16 and 1e-2 in fp16, where the CPU (fp32) meets 2e-3: weights and
// products' inputs are rounded to 16 bits (bf16 keeps 8 bits of mantissa); the same rounding
// emulated in Python (tests/fixtures/bert/emulate_16bit.py) gives 0.019 (bf16) and 0.003
// (fp16) on these fixtures. The pooled, normalized vectors must also point the same way
// (cosine above 0.999 in bf16). The measured differences are printed as "[ measured ]" lines.
// Skips without a GPU.

#include "runtime/model/cuda/cuda_encoder.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <cmath>
#include <filesystem>
#include <iostream>

#include "kernels/cuda/device_info.hpp"
#include "loaders/model_loader.hpp"
#include "tests/runtime/model/reference_fixture.hpp"

namespace weft {
namespace {

namespace dom = simdjson::dom;

std::vector<float> floats(dom::element e) {
  std::vector<float> out;
  for (auto v : e.get_array()) {
    if (v.is_array()) {
      for (auto w : v.get_array())
        out.push_back(static_cast<float>(w.get_double().value()));
    } else {
      out.push_back(static_cast<float>(v.get_double().value()));
    }
  }
  return out;
}

std::vector<std::int32_t> ints(dom::element e) {
  std::vector<std::int32_t> out;
  for (auto v : e.get_array())
    out.push_back(static_cast<std::int32_t>(v.get_int64().value()));
  return out;
}

double max_diff(const float* a, const std::vector<float>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < b.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
  return worst;
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

struct Case {
  std::vector<std::int32_t> ids, types;
  std::vector<float> last_hidden, mean, cls, mean_normalized;
};

class CudaEncoderReference
    : public ::testing::TestWithParam<std::tuple<std::string, cuda::Precision>> {
 protected:
  void SetUp() override {
    const auto list = cuda::visible_devices();
    if (list.devices.empty()) {
      GTEST_SKIP() << "no GPU visible (" << list.unavailable_reason
                   << "): GPU checks run on the device machine through scripts/gpu-check";
    }
  }
};

TEST_P(CudaEncoderReference, MatchesTransformersAloneAndBatched) {
  const auto& [name, precision] = GetParam();
  const auto dir = testing::source_dir() / "tests" / "fixtures" / "bert" / name;
  if (!std::filesystem::exists(dir / "reference.json")) {
    GTEST_SKIP() << dir.string()
                 << " is absent; make it with python3 tests/fixtures/bert/make_fixtures.py";
  }
  const double tolerance = precision == cuda::Precision::kBF16 ? 6e-2 : 1e-2;
  const double min_cosine = precision == cuda::Precision::kBF16 ? 0.999 : 0.9999;
  LoadOptions load;
  load.allow_encoder = true;
  auto loaded = load_model(dir, load);
  ASSERT_TRUE(loaded.ok()) << loaded.error().what();
  const model::EncoderModel& encoder = *loaded->encoder;
  model::CudaEncoderOptions options;
  options.precision = precision;
  options.max_tokens_per_step = 8;  // the batch below grows the step buffers
  auto gpu = model::CudaEncoder::create(encoder, options);
  ASSERT_TRUE(gpu.ok()) << gpu.error().what();
  EXPECT_GT(gpu.value()->weight_bytes(), 0u);

  dom::parser parser;
  dom::element root = parser.load((dir / "reference.json").string());
  std::vector<Case> cases;
  for (auto c : root["cases"].get_array()) {
    cases.push_back({ints(c["ids"]), ints(c["types"]), floats(c["last_hidden"]), floats(c["mean"]),
                     floats(c["cls"]), floats(c["mean_normalized"])});
  }
  ASSERT_GE(cases.size(), 7u);
  const int H = encoder.spec().hidden_size;

  double worst_hidden = 0, worst_pooled = 0, worst_cosine = 1;
  auto check = [&](const Case& c, const float* hidden, const std::string& what) {
    const int len = static_cast<int>(c.ids.size());
    const double d = max_diff(hidden, c.last_hidden);
    worst_hidden = std::max(worst_hidden, d);
    EXPECT_LT(d, tolerance) << what << ": last hidden states";
    for (auto [want, pooling, normalize] :
         {std::tuple{&c.mean, model::Pooling::kMean, false},
          std::tuple{&c.cls, model::Pooling::kCls, false},
          std::tuple{&c.mean_normalized, model::Pooling::kMean, true}}) {
      const auto pooled = model::pool_hidden_states(hidden, len, H, pooling, normalize);
      const double p = max_diff(pooled.data(), *want);
      worst_pooled = std::max(worst_pooled, p);
      EXPECT_LT(p, tolerance) << what << " " << model::to_string(pooling);
      const double cos = cosine(pooled, *want);
      worst_cosine = std::min(worst_cosine, cos);
      EXPECT_GT(cos, min_cosine) << what << " " << model::to_string(pooling);
    }
  };

  // Alone.
  for (std::size_t i = 0; i < cases.size(); ++i) {
    model::EncodeBatch batch;
    batch.tokens = cases[i].ids;
    batch.token_types = cases[i].types;
    batch.lengths = {static_cast<int>(batch.tokens.size())};
    std::vector<float> hidden;
    auto ok = gpu.value()->encode(batch, hidden);
    ASSERT_TRUE(ok.ok()) << ok.error().what();
    ASSERT_EQ(hidden.size(), batch.tokens.size() * static_cast<std::size_t>(H));
    check(cases[i], hidden.data(), "case " + std::to_string(i) + " alone");
  }
  // All together, in reverse order, in one forward pass.
  model::EncodeBatch batch;
  for (std::size_t i = cases.size(); i-- > 0;) {
    batch.tokens.insert(batch.tokens.end(), cases[i].ids.begin(), cases[i].ids.end());
    batch.token_types.insert(batch.token_types.end(), cases[i].types.begin(), cases[i].types.end());
    batch.lengths.push_back(static_cast<int>(cases[i].ids.size()));
  }
  std::vector<float> hidden;
  auto ok = gpu.value()->encode(batch, hidden);
  ASSERT_TRUE(ok.ok()) << ok.error().what();
  std::size_t at = 0;
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const std::size_t i = cases.size() - 1 - k;
    check(cases[i], hidden.data() + at * static_cast<std::size_t>(H),
          "case " + std::to_string(i) + " batched");
    at += cases[i].ids.size();
  }
  std::cout << "[ measured ] cuda encoder " << name << " " << cuda::precision_name(precision)
            << ": max |hidden - transformers| " << worst_hidden << ", pooled " << worst_pooled
            << ", min cosine " << worst_cosine << " (" << cases.size() << " cases, "
            << batch.tokens.size() << " tokens batched)\n";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaEncoderReference,
                         ::testing::Combine(::testing::Values("bert_tiny", "roberta_tiny"),
                                            ::testing::Values(cuda::Precision::kBF16,
                                                              cuda::Precision::kF16)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::string(cuda::precision_name(std::get<1>(info.param)));
                         });

// Invalid batches get the CPU encoder's errors, before anything runs on the device.
TEST(CudaEncoder, RefusesWhatTheCpuRefuses) {
  if (cuda::visible_devices().devices.empty()) GTEST_SKIP() << "no GPU visible";
  LoadOptions load;
  load.allow_encoder = true;
  auto loaded =
      load_model(testing::source_dir() / "tests" / "fixtures" / "bert" / "random_tiny", load);
  ASSERT_TRUE(loaded.ok()) << loaded.error().what();
  auto gpu = model::CudaEncoder::create(*loaded->encoder, {});
  ASSERT_TRUE(gpu.ok()) << gpu.error().what();
  model::EncodeBatch bad;
  bad.tokens = {2, 100000, 3};
  bad.lengths = {3};
  std::vector<float> hidden;
  auto r = gpu.value()->encode(bad, hidden);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.error().what()).find("token id 100000 is outside the vocabulary"),
            std::string::npos);
  bad.tokens = {2, 3};
  bad.lengths = {3};
  EXPECT_FALSE(gpu.value()->encode(bad, hidden).ok());
  // A good batch still runs after the refusals, and matches the CPU's forward pass.
  model::EncodeBatch good;
  good.tokens = {2, 100, 101, 3, 2, 5, 3};
  good.lengths = {4, 3};
  ASSERT_TRUE(gpu.value()->encode(good, hidden).ok());
  cpu::ThreadPool pool(1);
  std::vector<float> want;
  ASSERT_TRUE(loaded->encoder->encode(good, want, pool).ok());
  EXPECT_LT(max_diff(hidden.data(), want), 6e-2);
}

}  // namespace
}  // namespace weft
