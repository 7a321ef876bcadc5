// Every zoo family's CPU forward against transformers (fixtures by
// tests/fixtures/zoo/make_fixtures.py): the prompt's logits within 2e-3, the logits of each
// cached decode step fed the reference's tokens within 2e-3, and Weft's own greedy
// continuation identical to transformers' up to the first near-tie. Skips, printing the
// command that makes them, when the fixtures are absent.

#include "tests/runtime/model/zoo_fixture.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "loaders/model_loader.hpp"

namespace weft {
namespace {

namespace zoo = testing::zoo;

int argmax(const float* row, int n) {
  return static_cast<int>(std::max_element(row, row + n) - row);
}

class ZooFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(ZooFixture, CpuMatchesTransformers) {
  const auto dir = zoo::fixture_dir(GetParam());
  if (!std::filesystem::exists(dir / "reference.json")) {
    GTEST_SKIP() << dir.string() << " is absent: make the zoo fixtures on a machine with torch "
                 << "and transformers with: " << zoo::kMakeCommand;
  }
  auto loaded = load_model(dir);
  ASSERT_TRUE(loaded) << loaded.error().what();
  const auto& model = loaded->model;
  const auto ref = zoo::read_zoo_reference(dir);
  const int V = model.spec().vocab_size;
  const int len = static_cast<int>(ref.prompt_ids.size());
  ASSERT_EQ(ref.prompt_logits.size(), ref.prompt_ids.size());
  ASSERT_EQ(ref.step_logits.size(), ref.greedy_ids.size());

  for (bool free_running : {false, true}) {
    cpu::ThreadPool pool(2);
    model::KvCache kv(model.kv_layout(4), 16);
    model::SequenceSlice seq{0, len, {}, true};
    const int total = len + static_cast<int>(ref.greedy_ids.size());
    for (int p = 0; p < kv.pages_for(total); ++p)
      seq.page_table.push_back(*kv.allocate_page());
    model::StepBatch step;
    step.tokens = ref.prompt_ids;
    for (int i = 0; i < len; ++i)
      step.positions.push_back(i);
    step.sequences.push_back(seq);
    std::vector<float> logits;
    auto ok = model.forward(step, kv, logits, pool);
    ASSERT_TRUE(ok) << ok.error().what();
    if (!free_running) {
      for (int t = 0; t < len; ++t) {
        EXPECT_LE(zoo::max_abs_error(logits.data() + t * V, ref.prompt_logits[t]),
                  zoo::kLogitTolerance)
            << GetParam() << " prompt row " << t;
      }
    }
    const std::size_t compared = zoo::steps_before_near_tie(ref);
    std::vector<float> last(logits.end() - V, logits.end());
    for (std::size_t k = 0; k < ref.greedy_ids.size(); ++k) {
      if (!free_running) {
        EXPECT_LE(zoo::max_abs_error(last.data(), ref.step_logits[k]), zoo::kLogitTolerance)
            << GetParam() << " step " << k;
      }
      const int mine = argmax(last.data(), V);
      if (k < compared) {
        ASSERT_EQ(mine, ref.greedy_ids[k])
            << GetParam() << " greedy token " << k << (free_running ? " (free running)" : "");
      } else if (free_running) {
        break;  // past a near-tie the continuations may part
      }
      if (k + 1 == ref.greedy_ids.size()) break;
      // Teacher-forced: feed the reference's token; free running: our own.
      step.tokens = {free_running ? mine : ref.greedy_ids[k]};
      step.positions = {len + static_cast<int>(k)};
      step.sequences[0].token_count = 1;
      step.sequences[0].all_logits = false;
      ok = model.forward(step, kv, logits, pool);
      ASSERT_TRUE(ok) << ok.error().what();
      last = logits;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Zoo, ZooFixture, ::testing::ValuesIn(zoo::fixture_names()),
                         [](const auto& param) { return param.param; });

}  // namespace
}  // namespace weft
