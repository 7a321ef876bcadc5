// POST /v1/embeddings' request parsing and response JSON (actors/gateway_embeddings.*).

#include "actors/gateway_embeddings.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <cstring>

namespace weft::gateway {
namespace {

ServedModel served() {
  ServedModel m;
  m.name = "bert";
  m.vocab_size = 100;
  m.context_length = 40;
  return m;
}

std::string error_of(std::string_view body) {
  auto r = parse_embeddings_request(body, served(), 32);
  return r ? std::string("no error") : std::string(r.error().what());
}

TEST(GatewayEmbeddings, InputShapes) {
  auto one = parse_embeddings_request(R"({"input": "hi", "model": "bert"})", served(), 32);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->request.texts, std::vector<std::string>{"hi"});
  EXPECT_FALSE(one->base64);
  auto many = parse_embeddings_request(R"({"input": ["a", "b"], "encoding_format": "base64"})",
                                       served(), 32);
  ASSERT_TRUE(many.ok());
  EXPECT_EQ(many->request.texts.size(), 2u);
  EXPECT_TRUE(many->base64);
  auto ids = parse_embeddings_request(R"({"input": [2, 5, 3]})", served(), 32);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->request.token_ids, (std::vector<std::vector<std::int32_t>>{{2, 5, 3}}));
  auto lists = parse_embeddings_request(
      R"({"input": [[2, 3], [4]], "dimensions": 8, "pooling": "cls", "normalize": true})", served(),
      32);
  ASSERT_TRUE(lists.ok());
  EXPECT_EQ(lists->request.token_ids.size(), 2u);
  EXPECT_EQ(lists->dimensions, 8);
  EXPECT_EQ(lists->request.pooling, EmbeddingPooling::kCls);
  EXPECT_EQ(lists->request.normalize, true);
  EXPECT_FALSE(lists->request.truncate);
  auto cut = parse_embeddings_request(R"({"input": "a", "truncate": true})", served(), 32);
  ASSERT_TRUE(cut.ok());
  EXPECT_TRUE(cut->request.truncate);
}

TEST(GatewayEmbeddings, ErrorsNameTheParameter) {
  EXPECT_EQ(error_of(R"({"model": "bert"})"), "input: required");
  EXPECT_EQ(error_of(R"({"input": ""})"), "input: must not be an empty string");
  EXPECT_EQ(error_of(R"({"input": []})").rfind("input: expected a string", 0), 0u);
  EXPECT_EQ(error_of(R"({"input": ["a", [1]]})"), "input[1]: mixes token id arrays with strings");
  EXPECT_EQ(error_of(R"({"input": [1, 100]})"),
            "input[1]: token id 100 is outside the vocabulary [0, 100)");
  EXPECT_EQ(error_of(R"({"input": [[1], []]})"), "input[1]: an empty array of token ids");
  EXPECT_EQ(error_of(R"({"input": "a", "encoding_format": "int8"})"),
            "encoding_format: expected \"float\" or \"base64\", got \"int8\"");
  EXPECT_EQ(
      error_of(R"({"input": "a", "dimensions": 0})").rfind("dimensions: 0 is outside [1, 32]", 0),
      0u);
  EXPECT_EQ(error_of(R"({"input": "a", "model": "gpt"})"),
            "model: \"gpt\" is not served here; this server has \"bert\"");
  EXPECT_EQ(error_of(R"({"input": "a", "temperature": 1})"),
            "temperature: unknown or unsupported parameter");
  EXPECT_EQ(error_of(R"({"input": "a", "truncate": 512})"),
            "truncate: expected a boolean, got 512");
  EXPECT_EQ(error_of("[1]"), "the body is not a JSON object");
}

TEST(GatewayEmbeddings, Base64IsRfc4648) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
}

TEST(GatewayEmbeddings, ResponseShape) {
  EmbedResult result;
  result.embeddings = {{0.6f, 0.8f, 0.0f}, {1.5f, -2.0f, 0.25f}};
  result.prompt_tokens = 7;
  ParsedEmbeddings parsed;
  const std::string text = embeddings_response_json(result, parsed, served());
  // Floats in their shortest round-trip form.
  EXPECT_NE(text.find("\"embedding\":[0.6,0.8,0]"), std::string::npos) << text;
  EXPECT_NE(text.find("\"embedding\":[1.5,-2,0.25]"), std::string::npos) << text;
  simdjson::dom::parser parser;
  simdjson::dom::element v = parser.parse(text);
  EXPECT_EQ(std::string_view(v["object"]), "list");
  EXPECT_EQ(std::string_view(v["model"]), "bert");
  EXPECT_EQ(std::int64_t(v["data"].at(1)["index"]), 1);
  EXPECT_EQ(std::string_view(v["data"].at(1)["object"]), "embedding");
  EXPECT_EQ(std::int64_t(v["usage"]["prompt_tokens"]), 7);
  EXPECT_EQ(std::int64_t(v["usage"]["total_tokens"]), 7);
  // base64: the little-endian float32 bytes.
  parsed.base64 = true;
  parsed.dimensions = 2;
  simdjson::dom::parser parser64;
  simdjson::dom::element b = parser64.parse(embeddings_response_json(result, parsed, served()));
  const float unit[2] = {0.6f, 0.8f};  // already unit length: kept as they are
  std::string bytes(reinterpret_cast<const char*>(unit), sizeof unit);
  EXPECT_EQ(std::string_view(b["data"].at(0)["embedding"]), base64_encode(bytes));
  const float cut[2] = {1.5f, -2.0f};  // not unit length: not re-normalized
  bytes.assign(reinterpret_cast<const char*>(cut), sizeof cut);
  EXPECT_EQ(std::string_view(b["data"].at(1)["embedding"]), base64_encode(bytes));
}

}  // namespace
}  // namespace weft::gateway
