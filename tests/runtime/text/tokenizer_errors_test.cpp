// Bad input never crashes: malformed tokenizer.json files fail with the path and the reason,
// ill-formed UTF-8 is refused with its offset (Python's `tokenizers` cannot receive it at all:
// a str with a lone surrogate raises "TextInputSequence must be str"), ids out of range fail
// decode with the id and its position, and random input of every kind is handled.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "loaders/tokenizer_json.hpp"
#include "runtime/text/utf8.hpp"
#include "tests/runtime/text/text_test_data.hpp"

namespace weft::text::testing {
namespace {

std::string bad(const std::string& name) {
  return (fixtures_dir() / "bad" / name).string();
}

void expect_error(const std::string& path, ErrorCode code, const std::vector<std::string>& parts) {
  auto loaded = loaders::load_tokenizer(path);
  ASSERT_FALSE(loaded.ok()) << path;
  EXPECT_EQ(loaded.error().code(), code) << loaded.error().what();
  const std::string message = loaded.error().what();
  EXPECT_NE(message.find(path), std::string::npos) << message;
  for (const auto& part : parts)
    EXPECT_NE(message.find(part), std::string::npos) << message;
}

TEST(TokenizerJsonErrors, NameThePathTheFieldAndWhatWasExpected) {
  expect_error(bad("truncated.json"), ErrorCode::kParse, {"malformed JSON"});
  expect_error(bad("unknown_normalizer.json"), ErrorCode::kUnsupported,
               {"field normalizer", "normalizer type \"Nmt\""});
  expect_error(bad("unknown_model.json"), ErrorCode::kUnsupported,
               {"field model", "model type \"CharLevel\"", "expected BPE, WordPiece or Unigram"});
  expect_error(bad("merge_not_in_vocab.json"), ErrorCode::kParse,
               {"BPE merge 0", "\"c\", which is not in the vocabulary"});
  expect_error(bad("vocab_id_not_integer.json"), ErrorCode::kParse,
               {"field model.vocab[\"b\"]", "expected a non-negative integer"});
  expect_error(bad("bad_regex.json"), ErrorCode::kParse,
               {"field pre_tokenizer.pattern.Regex", "missing closing parenthesis"});
  expect_error(bad("huge_id.json"), ErrorCode::kParse,
               {"field model.vocab[\"ab\"]", "expected a token id below 16777216"});
  expect_error(bad("no_such_file.json"), ErrorCode::kNotFound, {"no such file"});
}

TEST(TokenizerJsonErrors, EveryTruncationOfARealFileFailsCleanly) {
  const auto text = [] {
    std::ifstream in(fixtures_dir() / "wordpiece.json");
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }();
  ASSERT_GT(text.size(), 1000u);
  for (std::size_t cut = 0; cut < text.size(); cut += 97) {
    auto tok = loaders::parse_tokenizer_json(text.substr(0, cut), "cut.json");
    ASSERT_FALSE(tok.ok()) << "a tokenizer.json cut at byte " << cut << " was accepted";
    EXPECT_EQ(std::string(tok.error().what()).rfind("cut.json: ", 0), 0u) << tok.error().what();
  }
}

TEST(TokenizerJsonErrors, WrongTypesInEveryComponentAreReported) {
  const auto minimal = [] {
    std::ifstream in(fixtures_dir() / "bad/minimal_bpe.json");
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }();
  ASSERT_TRUE(loaders::parse_tokenizer_json(minimal, "m.json").ok());
  const std::pair<std::string, std::string> cases[] = {
      {"\"normalizer\": null",
       "\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": 3}, \"content\": \"x\"}"},
      {"\"pre_tokenizer\": null",
       "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, \"behavior\": "
       "\"Sideways\"}"},
      {"\"decoder\": null", "\"decoder\": {\"type\": \"Nope\"}"},
      {"\"post_processor\": null",
       "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": "
       "{\"id\": \"<s>\"}}], \"special_tokens\": {}}"},
      {"\"added_tokens\": []", "\"added_tokens\": [{\"content\": \"x\"}]"},
      {"\"normalizer\": null", "\"normalizer\": {\"kind\": \"NFC\"}"},
  };
  for (const auto& [from, to] : cases) {
    std::string json = minimal;
    const auto pos = json.find(from);
    ASSERT_NE(pos, std::string::npos) << from;
    json.replace(pos, from.size(), to);
    auto tok = loaders::parse_tokenizer_json(json, "m.json");
    ASSERT_FALSE(tok.ok()) << to;
    const std::string message = tok.error().what();
    EXPECT_EQ(message.rfind("m.json: field ", 0), 0u) << message;
    EXPECT_NE(message.find("expected"), std::string::npos) << message;
  }
}

TEST(TokenizerInputErrors, IllFormedUtf8IsRefusedWithItsOffset) {
  for (const auto& name : tokenizer_names()) {
    const auto* loaded = load(name);
    ASSERT_NE(loaded, nullptr);
    for (const std::string text : {"ab\xff", "\xc0\x80", "x\xed\xa0\x80", "\xe6\x97",
                                   "\xf5\x80\x80\x80", "ok \xf0\x9f\x98"}) {
      auto ids = loaded->tokenizer->encode(text, true);
      ASSERT_FALSE(ids.ok()) << name;
      EXPECT_EQ(ids.error().code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(ids.error().what()).find("not valid UTF-8"), std::string::npos);
    }
    auto ids = loaded->tokenizer->encode("ab\xff", false);
    EXPECT_NE(std::string(ids.error().what()).find("0xff at offset 2"), std::string::npos)
        << ids.error().what();
  }
}

TEST(TokenizerInputErrors, DecodeRefusesUnknownIds) {
  for (const auto& name : tokenizer_names()) {
    const auto* loaded = load(name);
    ASSERT_NE(loaded, nullptr);
    const auto bound = static_cast<std::uint32_t>(loaded->tokenizer->vocab_size());
    const std::vector<std::uint32_t> ids = {1, 2, bound, 3};
    auto text = loaded->tokenizer->decode(ids, false);
    ASSERT_FALSE(text.ok());
    EXPECT_EQ(text.error().code(), ErrorCode::kOutOfRange);
    EXPECT_NE(
        std::string(text.error().what()).find("id " + std::to_string(bound) + " at position 2"),
        std::string::npos)
        << text.error().what();
    EXPECT_FALSE(loaded->tokenizer->decode(std::vector<std::uint32_t>{0xFFFFFFFFu}, true).ok());
  }
}

TEST(TokenizerInputErrors, RandomBytesAndRandomIdsNeverCrash) {
  std::mt19937 rng(7);
  for (const auto& name : tokenizer_names()) {
    const auto* loaded = load(name);
    ASSERT_NE(loaded, nullptr);
    const auto& tok = *loaded->tokenizer;
    for (int round = 0; round < 200; ++round) {
      std::string bytes(rng() % 64, '\0');
      for (auto& b : bytes)
        b = static_cast<char>(rng() % 256);
      auto ids = tok.encode(bytes, round % 2 == 0);
      EXPECT_EQ(ids.ok(), find_invalid_utf8(bytes) == std::string::npos);
      std::vector<std::uint32_t> random_ids(rng() % 32);
      for (auto& id : random_ids)
        id = rng() % tok.vocab_size();
      std::erase_if(random_ids, [&](std::uint32_t id) { return tok.id_to_token(id) == nullptr; });
      auto text = tok.decode(random_ids, round % 3 == 0);
      ASSERT_TRUE(text.ok()) << text.error().what();
      EXPECT_EQ(find_invalid_utf8(*text), std::string::npos)
          << name << ": decode gave ill-formed UTF-8";
    }
  }
}

TEST(Utf8, LossyDecodingReplacesMaximalSubpartsLikeRust) {
  EXPECT_EQ(utf8_lossy("a\xf0\x9f\x98"), "a\xEF\xBF\xBD");  // one truncated sequence
  EXPECT_EQ(utf8_lossy("\xe6\x97"
                       "A"),
            "\xEF\xBF\xBD"
            "A");                                                 // prefix, then ASCII
  EXPECT_EQ(utf8_lossy("\xc0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong: byte by byte
  EXPECT_EQ(utf8_lossy("\xed\xa0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(utf8_lossy("\xf4\x90\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(utf8_lossy("ok \xe2\x82\xac"), "ok \xe2\x82\xac");
  EXPECT_EQ(incomplete_utf8_tail("ab\xf0\x9f"), 2u);
  EXPECT_EQ(incomplete_utf8_tail("ab\xe2\x82\xac"), 0u);
}

TEST(TokenizerFiles, AFolderAndItsConfigNameTheSpecialTokens) {
  auto llama3 = loaders::load_tokenizer(tokenizer_path("llama3").parent_path());
  ASSERT_TRUE(llama3.ok()) << llama3.error().what();
  EXPECT_EQ(llama3->special.bos, "<|begin_of_text|>");
  EXPECT_EQ(llama3->special.bos_id, 128000u);
  auto qwen3 = loaders::load_tokenizer(tokenizer_path("qwen3").parent_path());
  ASSERT_TRUE(qwen3.ok());
  EXPECT_EQ(qwen3->special.eos, "<|im_end|>");
  EXPECT_EQ(qwen3->special.eos_id, 151645u);
  auto gemma3 = loaders::load_tokenizer(tokenizer_path("gemma3"));
  ASSERT_TRUE(gemma3.ok());
  EXPECT_EQ(gemma3->special.bos_id, 2u);
  EXPECT_EQ(gemma3->special.eos, "<end_of_turn>");
  EXPECT_EQ(gemma3->special.eos_id, gemma3->tokenizer->token_to_id("<end_of_turn>"));
  EXPECT_EQ(gemma3->special.pad_id, 0u);
}

}  // namespace
}  // namespace weft::text::testing

namespace weft::text::testing {
namespace {

TEST(TokenizerInputErrors, ARegexThatBlowsUpIsAnErrorNotACrash) {
  // Nested quantifiers backtrack exponentially; PCRE2's match limit stops them and encode
  // reports it instead of throwing or hanging.
  std::ifstream in(fixtures_dir() / "bad/minimal_bpe.json");
  std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string from = "\"pre_tokenizer\": null";
  json.replace(
      json.find(from), from.size(),
      R"("pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a|aa)+$"}, "behavior": "Isolated", "invert": false})");
  auto tok = loaders::parse_tokenizer_json(json, "blowup.json");
  ASSERT_TRUE(tok.ok()) << tok.error().what();
  auto ids = (*tok)->encode(std::string(5000, 'a') + "b", false);
  if (ids.ok()) GTEST_SKIP() << "PCRE2 finished this pattern within its limits";
  EXPECT_NE(std::string(ids.error().what()).find("failed on a text of"), std::string::npos)
      << ids.error().what();
}

}  // namespace
}  // namespace weft::text::testing

namespace weft::text::testing {
namespace {

TEST(TokenizerJsonErrors, CorruptedFilesLoadOrFailButNeverCrash) {
  // Each round overwrites a few bytes of a real tokenizer.json with random ones; whatever
  // still parses must also encode and decode.
  std::ifstream in(fixtures_dir() / "mistral_style.json");
  const std::string original((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  ASSERT_GT(original.size(), 1000u);
  std::mt19937 rng(11);
  int loaded = 0;
  for (int round = 0; round < 300; ++round) {
    std::string json = original;
    for (int k = 0; k < 3; ++k)
      json[rng() % json.size()] = static_cast<char>(rng() % 128);
    auto tok = loaders::parse_tokenizer_json(json, "corrupt.json");
    if (!tok.ok()) {
      EXPECT_EQ(std::string(tok.error().what()).rfind("corrupt.json: ", 0), 0u)
          << tok.error().what();
      continue;
    }
    ++loaded;
    auto ids = (*tok)->encode("Hello wörld 日本 <s> 123", true);
    if (ids.ok()) {
      EXPECT_TRUE((*tok)->decode(*ids, false).ok());
    }
  }
  EXPECT_GT(loaded, 0);  // some corruptions land in strings and leave a valid file
}

}  // namespace
}  // namespace weft::text::testing

// A vocabulary with a few ids far apart: its index holds the listed tokens only and survives
// the vocabulary's moves into the model and the tokenizer (its keys point into the tokens,
// short ones included). Building it once walked every id below the largest after every move.
TEST(TokenizerJsonErrors, SparseIdsLoadAndEncode) {
  const std::string json = R"({
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
              "max_input_chars_per_word": 100,
              "vocab": {"[UNK]": 0, "hi": 7, "there": 16000000, "##s": 9000000, "a": 3}},
    "pre_tokenizer": {"type": "WhitespaceSplit"}})";
  auto tok = weft::loaders::parse_tokenizer_json(json, "sparse.json");
  ASSERT_TRUE(tok.ok()) << tok.error().what();
  auto ids = (*tok)->encode("hi theres a zz", false);
  ASSERT_TRUE(ids.ok()) << ids.error().what();
  EXPECT_EQ(*ids, (std::vector<std::uint32_t>{7, 16000000, 9000000, 3, 0}));
  ASSERT_NE((*tok)->id_to_token(9000000), nullptr);
  EXPECT_EQ(*(*tok)->id_to_token(9000000), "##s");
  EXPECT_EQ((*tok)->id_to_token(9000001), nullptr);
}

// Special added tokens among sparse ids: decode skips every id whose token is a special
// token's content, the added ones and a model token with the same text, without walking the
// ids below the largest.
TEST(TokenizerJsonErrors, SparseIdsSkipTheirSpecialTokens) {
  const std::string json = R"({
    "added_tokens": [
      {"id": 12000000, "content": "[SEP]", "single_word": false, "lstrip": false,
       "rstrip": false, "normalized": false, "special": true},
      {"id": 5, "content": "[CLS]", "single_word": false, "lstrip": false,
       "rstrip": false, "normalized": false, "special": true}],
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
              "max_input_chars_per_word": 100,
              "vocab": {"[UNK]": 0, "hi": 7, "[SEP]": 15, "[CLS]": 5, "a": 3, "far": 9000000}},
    "pre_tokenizer": {"type": "WhitespaceSplit"}})";
  auto tok = weft::loaders::parse_tokenizer_json(json, "sparse_special.json");
  ASSERT_TRUE(tok.ok()) << tok.error().what();
  EXPECT_EQ((*tok)->vocab_size(), 12000001u);
  const std::vector<std::uint32_t> plain = {7, 3, 9000000};
  const std::vector<std::uint32_t> with_special = {5, 7, 12000000, 3, 15, 9000000};
  auto a = (*tok)->decode(plain, /*skip_special_tokens=*/true);
  auto b = (*tok)->decode(with_special, /*skip_special_tokens=*/true);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  auto kept = (*tok)->decode(with_special, /*skip_special_tokens=*/false);
  ASSERT_TRUE(kept.ok());
  EXPECT_NE(kept->find("[SEP]"), std::string::npos) << *kept;
  EXPECT_NE(kept->find("[CLS]"), std::string::npos) << *kept;
}

// tests/fuzz found this file slow (2026-11-26, `slow-unit-*`, 5 s under ASan): 1,983 WordPiece
// tokens, one of them with the id 14,371,458. It loads as a sparse vocabulary and works.
TEST(TokenizerJsonErrors, FuzzFindingWithAnIdInTheMillionsLoads) {
  const auto path = std::filesystem::path(WEFT_SOURCE_DIR) /
                    "tests/fixtures/fuzz_findings/tokenizer_json/"
                    "slow-unit-3900f76e5289d0d15946a42e356df2dcc46dcb2d";
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << path;
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto tok = weft::loaders::parse_tokenizer_json(json, path.string());
  ASSERT_TRUE(tok.ok()) << tok.error().what();
  EXPECT_EQ((*tok)->vocab_size(), 14371459u);
  ASSERT_NE((*tok)->id_to_token(14371458), nullptr);
  for (bool special : {false, true}) {
    auto ids = (*tok)->encode("Hello world! [CLS] l'\xC3\xA9t\xC3\xA9 123", special);
    ASSERT_TRUE(ids.ok()) << ids.error().what();
    EXPECT_FALSE(ids->empty());
    EXPECT_TRUE((*tok)->decode(*ids, !special).ok());
  }
}
