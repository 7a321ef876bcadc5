// The incremental detokenizer against the full decode, for every parity tokenizer and every
// corpus line: each delta is valid UTF-8 and the deltas add up to Tokenizer::decode.

#include "runtime/text/detokenizer.hpp"

#include <gtest/gtest.h>

#include "runtime/text/utf8.hpp"
#include "tests/runtime/text/text_test_data.hpp"

namespace weft::text::testing {
namespace {

// Streams `ids` in steps of `step` ids and checks the deltas.
void check_stream(const loaders::LoadedTokenizer& loaded, const std::vector<std::uint32_t>& ids,
                  bool skip_special, std::size_t step) {
  IncrementalDetokenizer detok(loaded.tokenizer, skip_special);
  std::string streamed;
  for (std::size_t i = 0; i < ids.size(); i += step) {
    auto delta = detok.push(std::span(ids).subspan(i, std::min(step, ids.size() - i)));
    ASSERT_TRUE(delta.ok()) << delta.error().what();
    EXPECT_EQ(find_invalid_utf8(*delta), std::string::npos) << "delta is not valid UTF-8";
    streamed += *delta;
  }
  auto rest = detok.finish();
  ASSERT_TRUE(rest.ok());
  streamed += *rest;
  EXPECT_EQ(streamed, *loaded.tokenizer->decode(ids, skip_special));
}

class Detokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(Detokenizer, DeltasAddUpToTheFullDecode) {
  const auto* loaded = load(GetParam());
  ASSERT_NE(loaded, nullptr);
  for (const auto& text : corpus()) {
    SCOPED_TRACE("text: \"" + text + "\"");
    const auto ids = *loaded->tokenizer->encode(text, true);
    for (bool skip : {false, true}) {
      for (std::size_t step : {1, 2, 5})
        check_stream(*loaded, ids, skip, step);
    }
  }
}

TEST_P(Detokenizer, NeverShowsAHalfCharacter) {
  // Text whose full decode has no U+FFFD must never show one mid-stream: the emoji, CJK and
  // Devanagari here are split across byte tokens by every tokenizer that has byte tokens.
  const auto* loaded = load(GetParam());
  ASSERT_NE(loaded, nullptr);
  const std::string text = "日本語 👩‍👩‍👧‍👦 नमस्ते 🇯🇵 ﬁ";
  const auto ids = *loaded->tokenizer->encode(text, false);
  if (loaded->tokenizer->decode(ids, false)->find("\xEF\xBF\xBD") != std::string::npos) {
    GTEST_SKIP() << GetParam() << " cannot represent this text (its decode has U+FFFD)";
  }
  IncrementalDetokenizer detok(loaded->tokenizer, false);
  for (auto id : ids) {
    auto delta = detok.push(id);
    ASSERT_TRUE(delta.ok());
    EXPECT_EQ(delta->find("\xEF\xBF\xBD"), std::string::npos);
  }
}

TEST_P(Detokenizer, RejectsUnknownIdsAndKeepsItsState) {
  const auto* loaded = load(GetParam());
  ASSERT_NE(loaded, nullptr);
  IncrementalDetokenizer detok(loaded->tokenizer, false);
  const auto ids = *loaded->tokenizer->encode("Hello world", false);
  std::string out = *detok.push(ids);
  const auto bad = detok.push(static_cast<std::uint32_t>(loaded->tokenizer->vocab_size()));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), ErrorCode::kOutOfRange);
  EXPECT_NE(std::string(bad.error().what()).find("cannot detokenize id"), std::string::npos);
  out += *detok.finish();
  EXPECT_EQ(out, *loaded->tokenizer->decode(ids, false));
}

INSTANTIATE_TEST_SUITE_P(AllTokenizers, Detokenizer, ::testing::ValuesIn(tokenizer_names()),
                         [](const auto& test_info) { return test_info.param; });

}  // namespace
}  // namespace weft::text::testing
