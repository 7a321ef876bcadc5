#pragma once
// The pieces of tokenizer.json (normalizer, pre_tokenizer, model, post_processor, decoder,
// added_tokens) turned into runtime/text objects. Internal to the tokenizer loader.

#include <simdjson.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/text/tokenizer.hpp"
#include "weft/error.hpp"

namespace weft::loaders {

// Ids index dense tables, so a hostile file must not make one of 2^32 entries: 2^24 is 64 times
// the largest vocabulary in use (Gemma's 262,144).
inline constexpr std::uint64_t kMaxTokenId = std::uint64_t{1} << 24;
inline constexpr const char* kMaxTokenIdText = "a token id below 16777216";

// A JSON value with the file it came from and its field path, so that every error can say
// "<file>: field <path>: expected <what>". Accessors throw weft::Error (kParse).
struct JsonNode {
  simdjson::dom::element value;
  std::string source;
  std::string field;

  [[noreturn]] void fail(const std::string& expected) const;
  // Missing and null both give nullopt.
  std::optional<JsonNode> find(const char* key) const;
  JsonNode at(const char* key) const;  // missing or null fails
  JsonNode at(std::size_t index, simdjson::dom::element element) const;
  std::string_view string() const;
  bool boolean() const;
  std::uint64_t unsigned_integer() const;
  double number() const;
  simdjson::dom::array array() const;
  simdjson::dom::object object() const;
  // Optional scalar fields with a default.
  bool boolean_or(const char* key, bool fallback) const;
  std::string string_or(const char* key, std::string fallback) const;
};

std::unique_ptr<text::Tokenizer> build_tokenizer(const JsonNode& root);

std::unique_ptr<text::Normalizer> build_normalizer(const JsonNode& node);
std::unique_ptr<text::PreTokenizer> build_pre_tokenizer(const JsonNode& node);
std::unique_ptr<text::Decoder> build_decoder(const JsonNode& node);
std::unique_ptr<text::PostProcessor> build_post_processor(const JsonNode& node,
                                                          const text::TokenizerParts& parts);
std::unique_ptr<text::Model> build_model(const JsonNode& node);

}  // namespace weft::loaders
