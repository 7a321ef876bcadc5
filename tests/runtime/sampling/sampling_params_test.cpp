// validate(): every field's error names the field, the value and the allowed range.

#include "runtime/sampling/sampling_params.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace weft::sampling {
namespace {

constexpr int kVocab = 1000;

std::string error_of(const SamplingParams& p, int vocab = kVocab) {
  const auto r = validate(p, vocab);
  if (r.ok()) {
    return "";
  }
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  return r.error().what();
}

void expect_error(const SamplingParams& p, const std::string& field, const std::string& value,
                  const std::string& range) {
  const std::string message = error_of(p);
  EXPECT_NE(message.find(field), std::string::npos) << message;
  EXPECT_NE(message.find(value), std::string::npos) << message;
  EXPECT_NE(message.find(range), std::string::npos) << message;
}

TEST(SamplingParamsValidate, DefaultsAndFullValidSetPass) {
  EXPECT_TRUE(validate(SamplingParams{}, kVocab).ok());
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_k = -1;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.typical_p = 0.5f;
  p.repetition_penalty = 0.5f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.logit_bias = {{0, -100.0f}, {999, 100.0f}};
  p.n = 128;
  p.max_tokens = 1;
  p.stop_token_ids = {0, 999};
  p.stop = std::vector<std::string>(16, "x");
  p.logprobs = 20;
  EXPECT_TRUE(validate(p, kVocab).ok()) << error_of(p);
}

TEST(SamplingParamsValidate, MessageFormat) {
  SamplingParams p;
  p.top_p = 1.5f;
  EXPECT_EQ(error_of(p), "top_p: 1.5 is outside (0, 1]");
}

TEST(SamplingParamsValidate, Temperature) {
  SamplingParams p;
  p.temperature = -0.5f;
  expect_error(p, "temperature", "-0.5", "[0, inf)");
  p.temperature = std::numeric_limits<float>::infinity();
  expect_error(p, "temperature", "inf", "[0, inf)");
  p.temperature = std::nanf("");
  expect_error(p, "temperature", "nan", "[0, inf)");
}

TEST(SamplingParamsValidate, TopK) {
  SamplingParams p;
  p.top_k = -2;
  expect_error(p, "top_k", "-2", "[-1, inf)");
  p.top_k = 5000;  // more than the vocabulary: keeps everything, allowed
  EXPECT_TRUE(validate(p, kVocab).ok());
}

TEST(SamplingParamsValidate, TopP) {
  SamplingParams p;
  p.top_p = 0.0f;
  expect_error(p, "top_p", "0", "(0, 1]");
  p.top_p = std::nanf("");
  expect_error(p, "top_p", "nan", "(0, 1]");
}

TEST(SamplingParamsValidate, MinP) {
  SamplingParams p;
  p.min_p = -0.1f;
  expect_error(p, "min_p", "-0.1", "[0, 1]");
  p.min_p = 1.01f;
  expect_error(p, "min_p", "1.01", "[0, 1]");
}

TEST(SamplingParamsValidate, TypicalP) {
  SamplingParams p;
  p.typical_p = 0.0f;
  expect_error(p, "typical_p", "0", "(0, 1]");
  p.typical_p = 2.0f;
  expect_error(p, "typical_p", "2", "(0, 1]");
}

TEST(SamplingParamsValidate, RepetitionPenalty) {
  SamplingParams p;
  p.repetition_penalty = 0.0f;
  expect_error(p, "repetition_penalty", "0", "(0, inf)");
  p.repetition_penalty = -1.0f;
  expect_error(p, "repetition_penalty", "-1", "(0, inf)");
}

TEST(SamplingParamsValidate, PresencePenalty) {
  SamplingParams p;
  p.presence_penalty = 2.5f;
  expect_error(p, "presence_penalty", "2.5", "[-2, 2]");
}

TEST(SamplingParamsValidate, FrequencyPenalty) {
  SamplingParams p;
  p.frequency_penalty = -3.0f;
  expect_error(p, "frequency_penalty", "-3", "[-2, 2]");
}

TEST(SamplingParamsValidate, LogitBias) {
  SamplingParams p;
  p.logit_bias = {{1000, 1.0f}};
  expect_error(p, "logit_bias", "1000", "[0, 1000)");
  p.logit_bias = {{-1, 1.0f}};
  expect_error(p, "logit_bias", "-1", "[0, 1000)");
  p.logit_bias = {{7, 100.5f}};
  expect_error(p, "logit_bias", "100.5", "[-100, 100]");
  p.logit_bias = {{7, 1.0f}, {3, 2.0f}, {7, 3.0f}};
  expect_error(p, "logit_bias", "7", "more than once");
}

TEST(SamplingParamsValidate, N) {
  SamplingParams p;
  p.n = 0;
  expect_error(p, "n:", "0", "[1, 128]");
  p.n = 129;
  expect_error(p, "n:", "129", "[1, 128]");
}

TEST(SamplingParamsValidate, MaxTokens) {
  SamplingParams p;
  p.max_tokens = 0;
  expect_error(p, "max_tokens", "0", "[1, inf)");
}

TEST(SamplingParamsValidate, StopTokenIds) {
  SamplingParams p;
  p.stop_token_ids = {2, 1000};
  expect_error(p, "stop_token_ids", "1000", "[0, 1000)");
}

TEST(SamplingParamsValidate, Stop) {
  SamplingParams p;
  p.stop = std::vector<std::string>(17, "x");
  expect_error(p, "stop", "17", "[0, 16]");
  p.stop = {"ok", ""};
  expect_error(p, "stop[1]", "empty", "[1, inf)");
}

TEST(SamplingParamsValidate, Logprobs) {
  SamplingParams p;
  p.logprobs = 21;
  expect_error(p, "logprobs", "21", "[0, 20]");
  p.logprobs = -1;
  expect_error(p, "logprobs", "-1", "[0, 20]");
}

TEST(SamplingParamsValidate, VocabSize) {
  EXPECT_NE(error_of(SamplingParams{}, 0).find("vocab_size"), std::string::npos);
}

TEST(SamplingParamsValidate, Truncates) {
  SamplingParams p;
  EXPECT_FALSE(truncates(p));
  p.top_k = -1;
  EXPECT_FALSE(truncates(p));
  p.min_p = 0.1f;
  EXPECT_TRUE(truncates(p));
}

}  // namespace
}  // namespace weft::sampling
