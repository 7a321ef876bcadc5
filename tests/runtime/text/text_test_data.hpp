#pragma once
// Where the tokenizer tests find their data: committed fixtures under tests/fixtures/tokenizers
// and the npm tokenizers that scripts/fetch-test-data puts in the build folder.

#include <gtest/gtest.h>
#include <simdjson.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "loaders/tokenizer_json.hpp"

namespace weft::text::testing {

inline std::filesystem::path fixtures_dir() {
  return std::filesystem::path(WEFT_SOURCE_DIR) / "tests/fixtures/tokenizers";
}

// The tokenizers checked for parity: the four npm ones and the six trained fixtures.
inline const std::vector<std::string>& tokenizer_names() {
  static const std::vector<std::string> names = {
      "llama3",  "qwen3",  "llama2",     "gemma3",      "wordpiece",
      "unigram", "t5_spm", "gpt2_style", "classic_bpe", "mistral_style"};
  return names;
}

inline std::filesystem::path tokenizer_path(const std::string& name) {
  if (name != "llama3" && name != "qwen3" && name != "llama2" && name != "gemma3") {
    return fixtures_dir() / (name + ".json");
  }
  return std::filesystem::path(WEFT_BINARY_DIR) / "test-data/tokenizers" / name / "tokenizer.json";
}

// Loads a tokenizer once per process; a missing npm tokenizer fails the test (never skips).
inline const loaders::LoadedTokenizer* load(const std::string& name) {
  static std::map<std::string, loaders::LoadedTokenizer> cache;
  if (auto it = cache.find(name); it != cache.end()) return &it->second;
  const auto path = tokenizer_path(name);
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << path << " is missing: run scripts/fetch-test-data " << WEFT_BINARY_DIR
                  << " to fetch the npm tokenizers the parity tests need";
    return nullptr;
  }
  auto loaded = loaders::load_tokenizer(path);
  if (!loaded) {
    ADD_FAILURE() << loaded.error().what();
    return nullptr;
  }
  return &cache.emplace(name, std::move(*loaded)).first->second;
}

// The parity corpus, one string per line of corpus.jsonl.
inline std::vector<std::string> corpus() {
  std::vector<std::string> lines;
  std::ifstream in(fixtures_dir() / "corpus.jsonl");
  simdjson::dom::parser parser;
  for (std::string line; std::getline(in, line);) {
    lines.emplace_back(parser.parse(simdjson::padded_string(line)).get_string().value());
  }
  return lines;
}

}  // namespace weft::text::testing
