// The encoder-only forward pass (BERT, XLM-R) against transformers: last hidden states and
// pooled vectors of tests/fixtures/bert/*_tiny (made by tests/fixtures/bert/make_fixtures.py on
// a machine with torch), within 2e-3. Also the WordPiece tokenizer's ids for the same texts.

#include <gtest/gtest.h>
#include <simdjson.h>

#include <cmath>
#include <filesystem>

#include "kernels/cpu/thread_pool.hpp"
#include "loaders/model_loader.hpp"
#include "loaders/tokenizer_json.hpp"
#include "tests/runtime/model/reference_fixture.hpp"

namespace weft {
namespace {

namespace dom = simdjson::dom;
constexpr double kTolerance = 2e-3;

std::filesystem::path bert_fixture(const std::string& name) {
  return testing::source_dir() / "tests" / "fixtures" / "bert" / name;
}

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

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
  return worst;
}

class EncoderReference : public ::testing::TestWithParam<std::string> {};

TEST_P(EncoderReference, MatchesTransformers) {
  const auto dir = bert_fixture(GetParam());
  if (!std::filesystem::exists(dir / "reference.json")) {
    GTEST_SKIP() << dir.string()
                 << " is absent; make it on a machine with torch and transformers:\n"
                    "  python3 tests/fixtures/bert/make_fixtures.py --out tests/fixtures/bert";
  }
  LoadOptions options;
  options.allow_encoder = true;
  auto loaded = load_model(dir, options);
  ASSERT_TRUE(loaded.ok()) << loaded.error().what();
  ASSERT_TRUE(loaded->encoder.has_value());
  const auto& encoder = *loaded->encoder;
  auto tokenizer = loaders::load_tokenizer(dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error().what();

  dom::parser parser;
  dom::element root = parser.load((dir / "reference.json").string());
  cpu::ThreadPool pool(2);
  int checked = 0;
  for (auto c : root["cases"].get_array()) {
    model::EncodeBatch batch;
    batch.tokens = ints(c["ids"]);
    batch.token_types = ints(c["types"]);
    batch.lengths = {static_cast<int>(batch.tokens.size())};
    std::string_view text;
    if (!c["text"].get(text)) {
      auto ids = tokenizer->tokenizer->encode(text, /*add_special_tokens=*/true);
      ASSERT_TRUE(ids.ok()) << ids.error().what();
      EXPECT_EQ(std::vector<std::int32_t>(ids->begin(), ids->end()), batch.tokens)
          << "tokenizer ids differ for \"" << text << "\"";
    }
    std::vector<float> hidden;
    auto ok = encoder.encode(batch, hidden, pool);
    ASSERT_TRUE(ok.ok()) << ok.error().what();
    EXPECT_LT(max_diff(hidden, floats(c["last_hidden"])), kTolerance) << "case " << checked;
    for (auto [key, pooling, normalize] :
         {std::tuple{"mean", model::Pooling::kMean, false},
          std::tuple{"cls", model::Pooling::kCls, false},
          std::tuple{"mean_normalized", model::Pooling::kMean, true}}) {
      auto pooled = encoder.embed(batch, pooling, normalize, pool);
      ASSERT_TRUE(pooled.ok()) << pooled.error().what();
      EXPECT_LT(max_diff(pooled->at(0), floats(c[key])), kTolerance)
          << "case " << checked << " " << key;
    }
    ++checked;
  }
  EXPECT_GE(checked, 7);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EncoderReference,
                         ::testing::Values("bert_tiny", "roberta_tiny"));

}  // namespace
}  // namespace weft
