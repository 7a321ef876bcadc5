#include "runtime/text/stop_strings.hpp"

#include <gtest/gtest.h>

#include "runtime/text/detokenizer.hpp"
#include "tests/runtime/text/text_test_data.hpp"

namespace weft::text {
namespace {

// Feeds `deltas` and returns what was shown, plus the stop index (or -1).
std::pair<std::string, int> run(std::vector<std::string> stops, std::vector<std::string> deltas) {
  StopStringMatcher matcher(std::move(stops));
  std::string shown;
  int stopped = -1;
  for (const auto& d : deltas) {
    auto out = matcher.push(d);
    shown += out.text;
    if (out.stopped) stopped = static_cast<int>(*out.stopped);
  }
  shown += matcher.finish();
  return {shown, stopped};
}

TEST(StopStrings, NoStopShowsEverything) {
  EXPECT_EQ(run({"STOP"}, {"Hello", " wor", "ld"}), std::make_pair(std::string("Hello world"), -1));
}

TEST(StopStrings, StopAcrossDeltasIsWithheld) {
  EXPECT_EQ(run({"o w"}, {"Hel", "lo", " wo", "rld"}), std::make_pair(std::string("Hell"), 0));
}

TEST(StopStrings, HeldPrefixIsReleasedWhenItDoesNotComplete) {
  StopStringMatcher m({"</end>"});
  EXPECT_EQ(m.push("a </e").text, "a ");
  EXPECT_EQ(m.push("x").text, "</ex");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push("</en").text, "");
  EXPECT_EQ(m.finish(), "</en");  // the end of generation releases a prefix that never completed
}

TEST(StopStrings, EarliestStopWinsThenFirstListed) {
  EXPECT_EQ(run({"world", "o"}, {"hello world"}), std::make_pair(std::string("hell"), 1));
  EXPECT_EQ(run({"ab", "a"}, {"xab"}), std::make_pair(std::string("x"), 0));
}

TEST(StopStrings, StopAtTheVeryStartAndAfterStopNothingMore) {
  StopStringMatcher m({"\n\n"});
  auto out = m.push("\n\nmore");
  EXPECT_EQ(out.text, "");
  EXPECT_TRUE(out.stopped);
  EXPECT_EQ(m.push("ignored").text, "");
  EXPECT_EQ(m.finish(), "");
}

TEST(StopStrings, MultiByteStopStrings) {
  EXPECT_EQ(run({"。"}, {"日本", "語\xE3\x80", "\x82", "続き"}).first, "日本語");
  EXPECT_EQ(run({"👋🏽"}, {"hi 👋", "🏽 there"}).first, "hi ");
}

TEST(StopStrings, EmptyStopStringsAreIgnored) {
  EXPECT_EQ(run({"", "zz"}, {"abc"}), std::make_pair(std::string("abc"), -1));
}

TEST(StopStrings, WithTheDetokenizerAcrossTokenBoundaries) {
  // A stop string that starts in the middle of one token and ends inside another.
  for (const std::string name : {"llama3", "llama2", "gemma3", "qwen3"}) {
    SCOPED_TRACE(name);
    const auto* loaded = testing::load(name);
    ASSERT_NE(loaded, nullptr);
    const auto ids = *loaded->tokenizer->encode("The answer is 42.\nUser: what else?", false);
    IncrementalDetokenizer detok(loaded->tokenizer, true);
    StopStringMatcher stop({"\nUser:", "nswer is 4"});
    std::string shown;
    for (auto id : ids) {
      auto out = stop.push(*detok.push(id));
      shown += out.text;
      if (out.stopped) break;
    }
    EXPECT_EQ(shown, "The a");
    EXPECT_TRUE(stop.stopped());
  }
}

}  // namespace
}  // namespace weft::text
