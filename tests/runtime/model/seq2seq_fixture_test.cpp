// Encoder-decoder models against transformers (fixtures by
// tests/fixtures/make_seq2seq_fixtures.py, made on a machine with torch): the encoder's last
// hidden states, the first decoder step's logits and every teacher-forced step's logits within
// 2e-3 (fp32), and Weft's own greedy continuation identical to transformers' up to the first
// near-tie. Skips, printing the command that makes them, when the fixtures are absent.

#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "loaders/model_loader.hpp"
#include "runtime/model/seq2seq_session.hpp"
#include "tests/runtime/model/zoo_fixture.hpp"

namespace weft {
namespace {

namespace zoo = testing::zoo;

const char* kMakeCommand =
    "PYTHONUNBUFFERED=1 python3 tests/fixtures/make_seq2seq_fixtures.py --out "
    "tests/fixtures/seq2seq";

struct Seq2SeqReference {
  std::vector<std::int32_t> encoder_ids;
  int decoder_start = 0;
  std::vector<std::vector<float>> encoder_hidden;
  std::vector<int> greedy_ids;
  std::vector<double> greedy_margins;
  std::vector<std::vector<float>> step_logits;
  std::optional<double> lm_head_input_scale;  // T5 only
};

Seq2SeqReference read_reference(const std::filesystem::path& dir) {
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.load((dir / "reference.json").string());
  Seq2SeqReference r;
  auto rows = [](simdjson::dom::array a, std::vector<std::vector<float>>& out) {
    for (auto row : a) {
      std::vector<float> values;
      for (auto v : row.get_array())
        values.push_back(static_cast<float>(v.get_double()));
      out.push_back(std::move(values));
    }
  };
  for (auto v : root["encoder_ids"].get_array())
    r.encoder_ids.push_back(static_cast<std::int32_t>(v.get_int64()));
  r.decoder_start = static_cast<int>(root["decoder_start_token_id"].get_int64());
  for (auto v : root["greedy_ids"].get_array())
    r.greedy_ids.push_back(static_cast<int>(v.get_int64()));
  for (auto v : root["greedy_margins"].get_array())
    r.greedy_margins.push_back(v.get_double());
  rows(root["encoder_hidden"].get_array(), r.encoder_hidden);
  rows(root["step_logits"].get_array(), r.step_logits);
  double scale = 0;
  if (!root["lm_head_input_scale"].get(scale)) r.lm_head_input_scale = scale;
  return r;
}

class Seq2SeqFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(Seq2SeqFixture, CpuMatchesTransformers) {
  const auto dir = testing::source_dir() / "tests" / "fixtures" / "seq2seq" / GetParam();
  if (!std::filesystem::exists(dir / "reference.json")) {
    GTEST_SKIP() << dir.string() << " is absent: make the encoder-decoder fixtures on a machine "
                 << "with torch and transformers with: " << kMakeCommand;
  }
  LoadOptions options;
  options.allow_seq2seq = true;
  auto loaded = load_model(dir, options);
  ASSERT_TRUE(loaded) << loaded.error().what();
  ASSERT_TRUE(loaded->seq2seq);
  const auto& model = *loaded->seq2seq;
  const auto ref = read_reference(dir);
  const int V = model.spec().vocab_size;
  ASSERT_EQ(ref.step_logits.size(), ref.greedy_ids.size());
  ASSERT_FALSE(ref.greedy_ids.empty());
  EXPECT_EQ(model.decoder_start_token_id(), ref.decoder_start);
  // What transformers multiplied the decoder's output by before the lm head (T5 tied: 1/8).
  if (ref.lm_head_input_scale) {
    EXPECT_NEAR(model.spec().seq2seq.lm_head_scale, *ref.lm_head_input_scale, 1e-4)
        << "the spec's lm_head_scale disagrees with transformers";
  }

  // The encoder's output.
  {
    model::KvCache kv(model.kv_layout(4), 64);
    cpu::ThreadPool pool(2);
    model::CrossAttentionSlice cross;
    cross.length = static_cast<int>(ref.encoder_ids.size());
    for (int p = 0; p < kv.pages_for(cross.length); ++p)
      cross.page_table.push_back(*kv.allocate_page());
    model::EncodeBatch batch;
    batch.tokens = ref.encoder_ids;
    batch.lengths = {cross.length};
    std::vector<float> hidden;
    auto ok = model.encode(batch, {cross}, kv, pool, cpu::KernelPath::kAuto, &hidden);
    ASSERT_TRUE(ok) << ok.error().what();
    const auto H = static_cast<std::size_t>(model.spec().hidden_size);
    ASSERT_EQ(ref.encoder_hidden.size(), ref.encoder_ids.size());
    for (std::size_t t = 0; t < ref.encoder_hidden.size(); ++t) {
      EXPECT_LE(zoo::max_abs_error(hidden.data() + t * H, ref.encoder_hidden[t]),
                zoo::kLogitTolerance)
          << "encoder token " << t;
    }
  }
  // Teacher forced (the reference's tokens), then free running (Weft's own argmax).
  for (const bool free_running : {false, true}) {
    model::Seq2SeqSession session(model, 4, 64, 2);
    auto ids = session.start({ref.encoder_ids}, static_cast<int>(ref.greedy_ids.size()) + 1);
    ASSERT_TRUE(ids) << ids.error().what();
    std::int32_t token = ref.decoder_start;
    std::vector<float> logits;
    const std::size_t compare = free_running ? zoo::steps_before_near_tie(zoo::ZooReference{
                                                   {}, {}, ref.greedy_ids, ref.greedy_margins, {}})
                                             : ref.greedy_ids.size();
    for (std::size_t k = 0; k < compare; ++k) {
      auto ok = session.step(*ids, {token}, logits);
      ASSERT_TRUE(ok) << ok.error().what();
      const int best =
          static_cast<int>(std::max_element(logits.begin(), logits.begin() + V) - logits.begin());
      if (free_running) {
        ASSERT_EQ(best, ref.greedy_ids[k]) << GetParam() << ": greedy step " << k;
        token = best;
      } else {
        EXPECT_LE(zoo::max_abs_error(logits.data(), ref.step_logits[k]), zoo::kLogitTolerance)
            << GetParam() << ": decoder step " << k;
        token = ref.greedy_ids[k];
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Seq2SeqFixture,
                         ::testing::Values("t5", "t5_gated_untied", "mt5", "m2m100"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace weft
