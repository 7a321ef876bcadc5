// The CUDA model against transformers' logits (the fixtures forward_reference_test uses), in
// bf16 and fp16; against the CPU model on weft-tiny, including contexts long enough for the
// split decode kernel; and greedy batch invariance. Skips without a GPU (scripts/gpu-check
// runs it on the device machine).

#include "runtime/model/cuda/cuda_model.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>

#include "kernels/cuda/device_info.hpp"
#include "loaders/model_loader.hpp"
#include "tests/runtime/model/reference_fixture.hpp"

namespace weft {
namespace {

using cuda::Precision;
using model::CudaModel;
using model::CudaModelOptions;
using model::SequenceSlice;
using model::StepBatch;
using testing::ReferencePrompt;

// Tolerances, as max |got - want| / max |want| over a row set. The GPU rounds weights and
// every activation between kernels to 16 bits (the residual stream and all accumulation stay
// fp32), so the error is that of bf16's 8-bit or fp16's 11-bit significand carried through
// the layers, not of the kernels' arithmetic (tests/kernels/cuda_kernels_test checks that
// against the CPU kernels elementwise). Measured on an H100 over the fixtures: at most 0.016
// in bf16 and 0.0014 in fp16 (docs/cuda.md); the bounds leave about 2x headroom.
double tolerance(Precision p) {
  return p == Precision::kBF16 ? 0.03 : 0.004;
}

bool have_gpu(std::string* why) {
  const auto list = cuda::visible_devices();
  if (list.devices.empty()) *why = list.unavailable_reason;
  return !list.devices.empty();
}

#define SKIP_WITHOUT_GPU()                                                                 \
  do {                                                                                     \
    std::string why;                                                                       \
    if (!have_gpu(&why)) {                                                                 \
      GTEST_SKIP() << "no GPU visible (" << why                                            \
                   << "): GPU checks run on the device machine through scripts/gpu-check"; \
    }                                                                                      \
  } while (0)

double relative_error(const float* got, const float* want, std::size_t n) {
  float max_ref = 0.0f, max_err = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    max_ref = std::max(max_ref, std::fabs(want[i]));
    max_err = std::max(max_err, std::fabs(got[i] - want[i]));
  }
  if (!std::isfinite(max_err)) return 1e30;
  return max_ref > 0 ? max_err / max_ref : max_err;
}

int argmax(const float* row, int n) {
  return static_cast<int>(std::max_element(row, row + n) - row);
}

void reserve(CudaModel& m, std::vector<std::int32_t>& table, int length) {
  while (static_cast<int>(table.size()) < m.pages_for(length)) {
    auto page = m.allocate_page();
    ASSERT_TRUE(page.has_value()) << "test ran out of KV pages";
    table.push_back(*page);
  }
}

CudaModel make(const model::Model& cpu, Precision p, int page_size, int pages = 256) {
  CudaModelOptions o;
  o.precision = p;
  o.page_size = page_size;
  o.num_pages = pages;
  o.max_tokens_per_step = 64;
  auto m = CudaModel::create(cpu, o);
  if (!m) throw m.error();
  return std::move(m.value());
}

struct Worst {
  double error = 0;
  std::string where;
  void add(double e, const std::string& w) {
    if (e > error) {
      error = e;
      where = w;
    }
  }
};

// Prefill in one step, then decode the reference's greedy tokens; returns the worst error.
void check_prompt(CudaModel& gpu, const ReferencePrompt& ref, int vocab, double tol,
                  const std::string& what, Worst& worst) {
  const int len = static_cast<int>(ref.prompt_ids.size());
  StepBatch step;
  step.tokens.assign(ref.prompt_ids.begin(), ref.prompt_ids.end());
  for (int i = 0; i < len; ++i)
    step.positions.push_back(i);
  SequenceSlice seq{0, len, {}, true};
  reserve(gpu, seq.page_table, len);
  step.sequences.push_back(seq);
  std::vector<float> logits;
  auto ok = gpu.forward(step, logits);
  ASSERT_TRUE(ok) << ok.error().what();
  ASSERT_EQ(logits.size(), ref.prefill.size());
  for (int t = 0; t < len; ++t) {
    const double e =
        relative_error(logits.data() + t * vocab, ref.prefill.data() + t * vocab, vocab);
    worst.add(e, what + " prefill row " + std::to_string(t));
    EXPECT_LE(e, tol) << what << " prefill row " << t;
  }
  int next = argmax(logits.data() + (len - 1) * vocab, vocab);
  const float max_logit = *std::max_element(ref.prefill.begin(), ref.prefill.end());
  for (std::size_t k = 0; k < ref.greedy_ids.size(); ++k) {
    if (ref.greedy_margins[k] > 4 * tol * std::fabs(max_logit)) {
      EXPECT_EQ(next, ref.greedy_ids[k]) << what << " greedy token " << k;
    }
    if (k + 1 == ref.greedy_ids.size()) break;
    const int pos = len + static_cast<int>(k);
    step.tokens = {ref.greedy_ids[k]};
    step.positions = {pos};
    reserve(gpu, step.sequences[0].page_table, pos + 1);
    step.sequences[0].token_count = 1;
    step.sequences[0].all_logits = false;
    ok = gpu.forward(step, logits);
    ASSERT_TRUE(ok) << ok.error().what();
    const double e = relative_error(logits.data(), ref.decode.data() + k * vocab, vocab);
    worst.add(e, what + " decode step " + std::to_string(k));
    EXPECT_LE(e, tol) << what << " decode step " << k;
    next = argmax(logits.data(), vocab);
  }
  for (auto page : step.sequences[0].page_table)
    gpu.release_page(page);
}

class CudaReference : public ::testing::TestWithParam<std::tuple<std::string, Precision>> {};

TEST_P(CudaReference, PrefillAndDecodeMatchTransformers) {
  SKIP_WITHOUT_GPU();
  const auto& [name, precision] = GetParam();
  const auto dir = testing::fixture_dir(name);
  auto loaded = load_model(dir);
  ASSERT_TRUE(loaded) << loaded.error().what();
  const auto prompts = testing::read_reference(dir);
  const int vocab = loaded->model.spec().vocab_size;
  const double tol = tolerance(precision);
  Worst worst;
  for (int page_size : {16, 1, 3}) {
    CudaModel gpu = make(loaded->model, precision, page_size);
    for (std::size_t p = 0; p < prompts.size(); ++p) {
      check_prompt(gpu, prompts[p], vocab, tol,
                   "page_size " + std::to_string(page_size) + " prompt " + std::to_string(p),
                   worst);
    }
  }
  std::cout << "[ measured ] " << name << " " << cuda::precision_name(precision)
            << ": worst relative logit error " << worst.error << " (" << worst.where
            << "), tolerance " << tol << "\n";
}

// All prompts prefill in one flat batch (the second in two chunks, the first chunk in an
// earlier step), then decode together: the same logits as the CPU model on the same steps.
TEST_P(CudaReference, BatchedAndChunkedStepsMatchTheCpuModel) {
  SKIP_WITHOUT_GPU();
  const auto& [name, precision] = GetParam();
  const auto dir = testing::fixture_dir(name);
  auto loaded = load_model(dir);
  ASSERT_TRUE(loaded) << loaded.error().what();
  const auto& cpu = loaded->model;
  if (cpu.spec().rope.scaling == model::RopeScaling::kDynamic) {
    GTEST_SKIP() << "dynamic NTK rope depends on the length at each step; chunked prefill "
                    "changes the logits (forward_reference_test skips it too)";
  }
  const auto prompts = testing::read_reference(dir);
  const int vocab = cpu.spec().vocab_size;
  CudaModel gpu = make(cpu, precision, 4);
  model::KvCache kv(cpu.kv_layout(4), 256);
  cpu::ThreadPool pool(2);
  Worst worst;
  // Both backends use the same page ids: allocate from the GPU pool, mirror on the CPU.
  std::vector<std::vector<std::int32_t>> tables(prompts.size());
  for (std::size_t p = 0; p < prompts.size(); ++p)
    reserve(gpu, tables[p],
            static_cast<int>(prompts[p].prompt_ids.size() + prompts[p].greedy_ids.size()));
  auto run_both = [&](const StepBatch& step, const std::string& what) {
    std::vector<float> g, c;
    auto ok = gpu.forward(step, g);
    ASSERT_TRUE(ok) << ok.error().what();
    ok = cpu.forward(step, kv, c, pool);
    ASSERT_TRUE(ok) << ok.error().what();
    ASSERT_EQ(g.size(), c.size());
    for (std::size_t r = 0; r < g.size() / vocab; ++r) {
      const double e = relative_error(g.data() + r * vocab, c.data() + r * vocab, vocab);
      worst.add(e, what + " row " + std::to_string(r));
      EXPECT_LE(e, tolerance(precision)) << what << " row " << r;
    }
  };
  // Step 1: the first half of prompt 1 alone.
  const auto& p1 = prompts.size() > 1 ? prompts[1] : prompts[0];
  const int split = static_cast<int>(p1.prompt_ids.size()) / 2;
  const std::size_t second = prompts.size() > 1 ? 1 : 0;
  {
    StepBatch step;
    for (int i = 0; i < split; ++i) {
      step.tokens.push_back(p1.prompt_ids[i]);
      step.positions.push_back(i);
    }
    step.sequences.push_back({0, split, tables[second], true});
    run_both(step, "first chunk");
  }
  // Step 2: prompt 0 whole, the rest of prompt 1, the others whole.
  {
    StepBatch step;
    for (std::size_t p = 0; p < prompts.size(); ++p) {
      const int begin = p == second ? split : 0;
      const int len = static_cast<int>(prompts[p].prompt_ids.size());
      SequenceSlice seq{static_cast<int>(step.tokens.size()), len - begin, tables[p], p == 0};
      for (int i = begin; i < len; ++i) {
        step.tokens.push_back(prompts[p].prompt_ids[i]);
        step.positions.push_back(i);
      }
      step.sequences.push_back(seq);
    }
    run_both(step, "batched prefill");
  }
  // Decode steps, all sequences together.
  for (std::size_t k = 0; k + 1 < prompts[0].greedy_ids.size(); ++k) {
    StepBatch step;
    for (std::size_t p = 0; p < prompts.size(); ++p) {
      step.tokens.push_back(prompts[p].greedy_ids[std::min(k, prompts[p].greedy_ids.size() - 1)]);
      step.positions.push_back(static_cast<int>(prompts[p].prompt_ids.size() + k));
      step.sequences.push_back({static_cast<int>(p), 1, tables[p], false});
    }
    run_both(step, "batched decode " + std::to_string(k));
  }
  std::cout << "[ measured ] " << name << " " << cuda::precision_name(precision)
            << ": batched/chunked GPU vs CPU worst relative logit error " << worst.error << " ("
            << worst.where << ")\n";
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, CudaReference,
    ::testing::Combine(::testing::ValuesIn(testing::fixture_models()),
                       ::testing::Values(Precision::kBF16, Precision::kF16)),
    [](const ::testing::TestParamInfo<std::tuple<std::string, Precision>>& param) {
      return std::get<0>(param.param) + "_" + cuda::precision_name(std::get<1>(param.param));
    });

const std::filesystem::path kTinyDir = testing::source_dir() / "models/weft-tiny";

std::vector<int> random_tokens(int n, int vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(1, vocab - 1);
  std::vector<int> out(n);
  for (auto& t : out)
    t = dist(rng);
  return out;
}

// weft-tiny (bf16 weights) on the CPU (fp32 arithmetic) and the GPU: a 700-token prompt
// prefilled in chunks of 300, then decode steps whose context passes 512 positions, so the
// split (flash-decoding) kernel runs.
TEST(CudaModel, AgreesWithTheCpuModelOnWeftTinyIncludingSplitDecode) {
  SKIP_WITHOUT_GPU();
  auto loaded = load_model(kTinyDir);
  ASSERT_TRUE(loaded) << loaded.error().what();
  const auto& cpu = loaded->model;
  const int vocab = cpu.spec().vocab_size;
  for (Precision precision : {Precision::kBF16, Precision::kF16}) {
    CudaModel gpu = make(cpu, precision, 16, 128);
    model::KvCache kv(cpu.kv_layout(16), 128);
    cpu::ThreadPool pool(8);
    const auto prompt = random_tokens(700, vocab, 7);
    std::vector<std::int32_t> table;
    reserve(gpu, table, 720);
    Worst worst;
    int argmax_mismatch = 0, rows = 0;
    auto run_both = [&](const StepBatch& step, const std::string& what) {
      std::vector<float> g, c;
      auto ok = gpu.forward(step, g);
      ASSERT_TRUE(ok) << ok.error().what();
      ok = cpu.forward(step, kv, c, pool);
      ASSERT_TRUE(ok) << ok.error().what();
      ASSERT_EQ(g.size(), c.size());
      for (std::size_t r = 0; r < g.size() / vocab; ++r, ++rows) {
        const double e = relative_error(g.data() + r * vocab, c.data() + r * vocab, vocab);
        worst.add(e, what + " row " + std::to_string(r));
        EXPECT_LE(e, tolerance(precision)) << what << " row " << r;
        argmax_mismatch +=
            argmax(g.data() + r * vocab, vocab) != argmax(c.data() + r * vocab, vocab);
      }
    };
    {
      // A short prompt first, in its own pages, within the step buffers made at creation.
      std::vector<std::int32_t> short_table;
      reserve(gpu, short_table, 10);
      StepBatch step;
      for (int i = 0; i < 10; ++i) {
        step.tokens.push_back(prompt[i]);
        step.positions.push_back(i);
      }
      step.sequences.push_back({0, 10, short_table, true});
      run_both(step, "short prompt");
    }
    for (int begin = 0; begin < 700; begin += 300) {
      const int end = std::min(700, begin + 300);
      StepBatch step;
      for (int i = begin; i < end; ++i) {
        step.tokens.push_back(prompt[i]);
        step.positions.push_back(i);
      }
      step.sequences.push_back({0, end - begin, table, true});
      run_both(step, "prefill chunk at " + std::to_string(begin));
    }
    for (int pos = 700; pos < 710; ++pos) {
      StepBatch step;
      step.tokens = {prompt[pos - 600]};
      step.positions = {pos};
      step.sequences.push_back({0, 1, table, false});
      run_both(step, "decode at " + std::to_string(pos));
    }
    std::cout << "[ measured ] weft-tiny " << cuda::precision_name(precision)
              << ": GPU vs CPU worst relative logit error " << worst.error << " (" << worst.where
              << "), argmax differs on " << argmax_mismatch << " of " << rows << " rows\n";
    EXPECT_LE(argmax_mismatch, rows / 20);
  }
}

// Quantized weft-tiny (docs/quantization.md), every format, on the GPU and the CPU: prefill
// dequantizes the weights matrix by matrix into 16 bits for cuBLAS, steps of up to 24 tokens
// read them through cuda::quant_gemv (8 tokens per pass); both against the CPU's fused kernels over
// the same blocks. The GPU rounds the dequantized weights to 16 bits for prefill, hence twice the
// usual bound. Decode is greedy (each step feeds the CPU's argmax): the GPU picks the same
// token except at near-ties. The GPU holds the quantized weights only (less than the 16-bit
// model).
TEST(CudaModel, QuantizedWeightsAgreeWithTheCpuModel) {
  SKIP_WITHOUT_GPU();
  std::size_t bf16_weight_bytes = 0;
  {
    auto plain = load_model(kTinyDir);
    ASSERT_TRUE(plain) << plain.error().what();
    bf16_weight_bytes = make(plain->model, Precision::kBF16, 16, 64).weight_bytes();
  }
  for (const auto type : quant::all_quant_types()) {
    const std::string name(quant::quant_info(type).name);
    LoadOptions options;
    options.quantize = type;
    auto loaded = load_model(kTinyDir, options);
    ASSERT_TRUE(loaded) << loaded.error().what();
    const auto& cpu = loaded->model;
    const int vocab = cpu.spec().vocab_size;
    CudaModel gpu = make(cpu, Precision::kBF16, 16, 64);
    EXPECT_LT(gpu.weight_bytes(), bf16_weight_bytes) << name << ": a 16-bit copy is still there";
    model::KvCache kv(cpu.kv_layout(16), 64);
    cpu::ThreadPool pool(8);
    const auto prompt = random_tokens(100, vocab, 3);
    std::vector<std::int32_t> table;
    reserve(gpu, table, 120);
    Worst worst;
    int argmax_mismatch = 0, rows = 0;
    std::int32_t next = 0;  // the CPU's greedy token after the last row
    auto run_both = [&](const StepBatch& step, const std::string& what) {
      std::vector<float> g, c;
      auto ok = gpu.forward(step, g);
      ASSERT_TRUE(ok) << ok.error().what();
      ok = cpu.forward(step, kv, c, pool);
      ASSERT_TRUE(ok) << ok.error().what();
      ASSERT_EQ(g.size(), c.size());
      for (std::size_t r = 0; r < g.size() / vocab; ++r, ++rows) {
        const float* gr = g.data() + r * vocab;
        const float* cr = c.data() + r * vocab;
        const double e = relative_error(gr, cr, vocab);
        worst.add(e, what + " row " + std::to_string(r));
        EXPECT_LE(e, 2 * tolerance(Precision::kBF16)) << name << " " << what << " row " << r;
        const int want = argmax(cr, vocab), got = argmax(gr, vocab);
        if (want != got) {
          ++argmax_mismatch;
          // A differing greedy token only where the CPU's top two are a near-tie.
          EXPECT_LT(cr[want] - cr[got], 0.05f * std::max(1.0f, std::fabs(cr[want])))
              << name << " " << what << ": GPU picks " << got << ", CPU " << want;
        }
        next = want;
      }
    };
    StepBatch prefill;
    for (int i = 0; i < 60; ++i) {  // within the step buffers (64 tokens)
      prefill.tokens.push_back(prompt[i]);
      prefill.positions.push_back(i);
    }
    prefill.sequences.push_back({0, 60, table, true});
    run_both(prefill, "prefill");
    // A step of 5 tokens: the small-batch product.
    StepBatch chunk;
    for (int i = 60; i < 65; ++i) {
      chunk.tokens.push_back(prompt[i]);
      chunk.positions.push_back(i);
    }
    chunk.sequences.push_back({0, 5, table, true});
    run_both(chunk, "chunk of 5");
    // 12 tokens: two passes of the small-batch product (8 + 4 tokens).
    StepBatch chunk12;
    for (int i = 65; i < 77; ++i) {
      chunk12.tokens.push_back(prompt[i]);
      chunk12.positions.push_back(i);
    }
    chunk12.sequences.push_back({0, 12, table, true});
    run_both(chunk12, "chunk of 12");
    for (int pos = 77; pos < 92; ++pos) {
      StepBatch step;
      step.tokens = {next};
      step.positions = {pos};
      step.sequences.push_back({0, 1, table, false});
      run_both(step, "decode at " + std::to_string(pos));
    }
    std::cout << "[ measured ] weft-tiny " << name << ": GPU vs CPU worst relative logit error "
              << worst.error << " (" << worst.where << "), argmax differs on " << argmax_mismatch
              << " of " << rows << " rows; GPU weights " << gpu.weight_bytes() << " bytes (bf16 "
              << bf16_weight_bytes << ")\n";
    // Below 4 bits weft-tiny's logits flatten and near-ties multiply: those formats are held
    // to the near-tie rule above only.
    if (quant::quant_info(type).code_bits_per_weight() >= 4) {
      EXPECT_LE(argmax_mismatch, rows / 10 + 1) << name;
    }
  }
}

// Greedy generation of a sequence alone and in a batch of others (of other lengths, one of
// them still prefilling) gives the same tokens.
TEST(CudaModel, GreedyTokensDoNotDependOnTheBatch) {
  SKIP_WITHOUT_GPU();
  auto loaded = load_model(kTinyDir);
  ASSERT_TRUE(loaded) << loaded.error().what();
  const int vocab = loaded->model.spec().vocab_size;
  const int steps = 16;
  const std::vector<std::vector<int>> prompts{
      random_tokens(9, vocab, 1), random_tokens(40, vocab, 2), random_tokens(3, vocab, 3),
      random_tokens(600, vocab, 4)};
  for (Precision precision : {Precision::kBF16, Precision::kF16}) {
    CudaModel gpu = make(loaded->model, precision, 16, 256);
    // Generates greedily for the given prompts in one batch: all prefill together, except the
    // last, which starts one step later (so its prefill shares a step with others' decode).
    auto generate = [&](const std::vector<std::size_t>& which) {
      std::vector<std::vector<int>> out(which.size());
      std::vector<std::vector<std::int32_t>> tables(which.size());
      std::vector<int> length(which.size(), 0);
      std::vector<int> last(which.size(), -1);
      for (std::size_t i = 0; i < which.size(); ++i)
        reserve(gpu, tables[i], static_cast<int>(prompts[which[i]].size()) + steps + 2);
      for (int step_index = 0; step_index <= steps + 1; ++step_index) {
        StepBatch step;
        std::vector<std::size_t> members;
        for (std::size_t i = 0; i < which.size(); ++i) {
          const bool late = which.size() > 1 && i + 1 == which.size();
          const int start = late ? 1 : 0;
          if (step_index < start || static_cast<int>(out[i].size()) >= steps) continue;
          SequenceSlice seq{static_cast<int>(step.tokens.size()), 0, tables[i], false};
          if (length[i] == 0) {
            for (int t : prompts[which[i]]) {
              step.tokens.push_back(t);
              step.positions.push_back(length[i]++);
            }
          } else {
            step.tokens.push_back(last[i]);
            step.positions.push_back(length[i]++);
          }
          seq.token_count = static_cast<int>(step.tokens.size()) - seq.token_begin;
          step.sequences.push_back(seq);
          members.push_back(i);
        }
        if (members.empty()) break;
        std::vector<float> logits;
        auto ok = gpu.forward(step, logits);
        EXPECT_TRUE(ok) << ok.error().what();
        if (!ok) return out;
        for (std::size_t r = 0; r < members.size(); ++r) {
          last[members[r]] = argmax(logits.data() + r * vocab, vocab);
          out[members[r]].push_back(last[members[r]]);
        }
      }
      for (auto& table : tables)
        for (auto page : table)
          gpu.release_page(page);
      return out;
    };
    const auto together = generate({0, 1, 2, 3});
    for (std::size_t p = 0; p < prompts.size(); ++p) {
      const auto alone = generate({p});
      EXPECT_EQ(alone[0], together[p])
          << cuda::precision_name(precision) << " prompt " << p << " alone vs batched";
    }
  }
}

// Decode steps replayed as CUDA graphs (the default) give exactly the logits of plain
// launches, across batch shapes, a sequence sitting a step out, and contexts crossing the
// 64-position split boundary (a new graph).
TEST(CudaModel, DecodeGraphsGiveTheSameLogitsAsPlainLaunches) {
  SKIP_WITHOUT_GPU();
  auto loaded = load_model(kTinyDir);
  ASSERT_TRUE(loaded) << loaded.error().what();
  const int vocab = loaded->model.spec().vocab_size;
  CudaModelOptions with, without;
  with.num_pages = without.num_pages = 64;
  without.cuda_graphs = false;
  auto a = CudaModel::create(loaded->model, with);
  auto b = CudaModel::create(loaded->model, without);
  ASSERT_TRUE(a && b);
  const std::vector<std::vector<int>> prompts{
      random_tokens(60, vocab, 11), random_tokens(5, vocab, 12), random_tokens(130, vocab, 13)};
  std::vector<std::vector<std::int32_t>> tables(prompts.size());
  for (std::size_t p = 0; p < prompts.size(); ++p)
    reserve(a.value(), tables[p], static_cast<int>(prompts[p].size()) + 24);
  std::vector<int> length(prompts.size(), 0), last(prompts.size(), 0);
  for (int step_index = 0; step_index < 21; ++step_index) {
    StepBatch step;
    for (std::size_t p = 0; p < prompts.size(); ++p) {
      SequenceSlice seq{static_cast<int>(step.tokens.size()), 0, tables[p], false};
      if (step_index == 0) {
        for (int t : prompts[p]) {
          step.tokens.push_back(t);
          step.positions.push_back(length[p]++);
        }
      } else if (!(p == 1 && step_index % 5 == 0)) {  // sequence 1 sits some steps out
        step.tokens.push_back(last[p]);
        step.positions.push_back(length[p]++);
      }
      seq.token_count = static_cast<int>(step.tokens.size()) - seq.token_begin;
      step.sequences.push_back(seq);
    }
    std::vector<float> la, lb;
    auto ok = a->forward(step, la);
    ASSERT_TRUE(ok) << ok.error().what();
    ok = b->forward(step, lb);
    ASSERT_TRUE(ok) << ok.error().what();
    ASSERT_EQ(la, lb) << "step " << step_index;
    std::size_t row = 0;
    for (std::size_t p = 0; p < prompts.size(); ++p) {
      if (step.sequences[p].token_count == 0) continue;
      last[p] = argmax(la.data() + row * vocab, vocab);
      ++row;
    }
  }
}

// CudaModelOptions::decode_segment_keys: -1, 0 or a multiple of 64 from 64 to 4096; anything
// else is refused by name before any GPU is touched (so this part runs without one).
TEST(CudaModel, RefusesADecodeSegmentThatIsNotAMultipleOf64) {
  auto loaded = load_model(kTinyDir);
  ASSERT_TRUE(loaded) << loaded.error().what();
  for (const int bad : {100, 32, 8192, -2}) {
    CudaModelOptions o;
    o.num_pages = 16;
    o.decode_segment_keys = bad;
    auto m = CudaModel::create(loaded->model, o);
    ASSERT_FALSE(m) << bad;
    EXPECT_EQ(m.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(m.error().what()).find("decode_segment_keys " + std::to_string(bad)),
              std::string::npos)
        << m.error().what();
  }
  SKIP_WITHOUT_GPU();
  CudaModelOptions o;
  o.num_pages = 16;
  o.decode_segment_keys = 128;
  auto m = CudaModel::create(loaded->model, o);
  ASSERT_TRUE(m) << m.error().what();
}

TEST(CudaModel, RejectsInvalidStepsLikeTheCpuModel) {
  SKIP_WITHOUT_GPU();
  auto loaded = load_model(kTinyDir);
  ASSERT_TRUE(loaded) << loaded.error().what();
  CudaModel gpu = make(loaded->model, Precision::kBF16, 16, 4);
  std::vector<float> logits;
  StepBatch bad_token{{99999}, {0}, {{0, 1, {0}, false}}};
  auto r = gpu.forward(bad_token, logits);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(r.error().what()).find("outside the vocabulary"), std::string::npos);
  StepBatch bad_page{{1}, {0}, {{0, 1, {4}, false}}};
  EXPECT_FALSE(gpu.forward(bad_page, logits));
  StepBatch beyond{{1}, {16}, {{0, 1, {0}, false}}};
  EXPECT_FALSE(gpu.forward(beyond, logits));
  // A valid step still runs after the rejected ones.
  StepBatch ok_step{{1, 2}, {0, 1}, {{0, 2, {0}, false}}};
  auto ok = gpu.forward(ok_step, logits);
  ASSERT_TRUE(ok) << ok.error().what();
  EXPECT_EQ(logits.size(), static_cast<std::size_t>(loaded->model.spec().vocab_size));
}

}  // namespace
}  // namespace weft
