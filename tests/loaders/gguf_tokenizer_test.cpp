// Tokenizers from GGUF metadata: weft-tiny's (gpt2 BPE) encodes and decodes like its
// tokenizer.json; a hand-made SentencePiece-style (llama) vocabulary merges by score and
// falls back to bytes as worked out by hand; the chat template and special tokens come along;
// bad tokenizer metadata is an error naming the key.
#include "loaders/gguf_tokenizer.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <unordered_map>

#include "tests/loaders/gguf_test_models.hpp"

namespace weft::gguf::testing {
namespace {

const std::vector<std::string> kSamples = {
    "Once upon a time",
    "The quick brown fox jumps over the lazy dog.\n\nIt's 2026; isn't it?",
    "  leading spaces, trailing spaces   ",
    "<|user|>\nhello there<|end|>\n<|assistant|>\n",
    "Unicode: caf\xc3\xa9, na\xc3\xafve, \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e, emoji "
    "\xf0\x9f\x98\x80",
    "numbers 1234567 and 3.14159, tabs\tand\r\nCRLF",
    "",
};

TEST(GgufTokenizer, WeftTinyEncodesAndDecodesLikeItsTokenizerJson) {
  auto want = loaders::load_tokenizer(source_path("models/weft-tiny"));
  ASSERT_TRUE(want) << want.error().what();
  const auto path = converted("models/weft-tiny", "q8_0");
  auto got = loaders::load_tokenizer(path);  // load_tokenizer takes a GGUF file
  ASSERT_TRUE(got) << got.error().what();
  EXPECT_EQ(got->tokenizer->vocab_size(), want->tokenizer->vocab_size());
  for (const auto& text : kSamples) {
    for (bool special : {false, true}) {
      auto a = got->tokenizer->encode(text, special);
      auto b = want->tokenizer->encode(text, special);
      ASSERT_TRUE(a && b) << text;
      EXPECT_EQ(*a, *b) << "\"" << text << "\"";
      for (bool skip : {false, true}) {
        EXPECT_EQ(got->tokenizer->decode(*a, skip).value(),
                  want->tokenizer->decode(*b, skip).value())
            << text;
      }
    }
  }
  for (std::uint32_t id : {0u, 4u, 5u, 100u, 8191u}) {
    EXPECT_EQ(got->tokenizer->is_special(id), want->tokenizer->is_special(id)) << id;
    EXPECT_EQ(*got->tokenizer->id_to_token(id), *want->tokenizer->id_to_token(id)) << id;
  }
  EXPECT_EQ(got->special.eos, "<|endoftext|>");
  EXPECT_EQ(got->special.eos_id, 0u);
}

TEST(GgufTokenizer, ChatTemplateAndSpecialTokensComeFromTheMetadata) {
  const auto path = converted("models/weft-tiny", "q8_0");
  auto file = read_chat_template_file(path);
  ASSERT_TRUE(file) << file.error().what();
  auto want = read_chat_template_file(source_path("models/weft-tiny"));
  ASSERT_TRUE(want);
  ASSERT_EQ(file->templates.size(), 1u);
  EXPECT_EQ(file->templates[0].first, "default");
  EXPECT_EQ(file->templates[0].second, want->templates[0].second);
  const jinja::Value* eos = file->special_tokens.find("eos_token");
  ASSERT_NE(eos, nullptr);
  EXPECT_EQ(eos->as_string(), "<|endoftext|>");
  auto parsed = load_chat_template(path, /*with_tools=*/false);
  EXPECT_TRUE(parsed) << parsed.error().what();
  // The constraint engine reads the same tokenizer.json text.
  auto text = read_tokenizer_json_text(path);
  ASSERT_TRUE(text) << text.error().what();
  EXPECT_NE(text->find("\"merges\""), std::string::npos);
}

TEST(GgufTokenizer, FileWithoutTemplateIsNotFound) {
  const auto path = write_synthetic("no-template", {});
  auto file = read_chat_template_file(path);
  ASSERT_FALSE(file);
  EXPECT_EQ(file.error().code(), ErrorCode::kNotFound);
  EXPECT_NE(std::string(file.error().what()).find("tokenizer.chat_template"), std::string::npos);
}

// A SentencePiece-style vocabulary: <unk>, <s>, </s>, 256 byte tokens, then pieces whose
// scores decide the merge order.
Writer spm_writer(bool add_bos = true) {
  Writer w;
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<std::int32_t> types = {2, 3, 3};
  std::vector<float> scores = {0, 0, 0};
  static const char* kHex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">");
    types.push_back(6);
    scores.push_back(0);
  }
  const std::vector<std::pair<std::string, float>> pieces = {
      {"\xe2\x96\x81", -1},  // 259: "▁"
      {"h", -5},
      {"e", -5},
      {"l", -5},
      {"o", -5},
      {"w", -5},
      {"r", -5},
      {"d", -5},                  // 260-266
      {"\xe2\x96\x81h", -3},      // 267: ▁h
      {"ll", -2},                 // 268
      {"llo", -2.5},              // 269
      {"\xe2\x96\x81he", -2.8},   // 270: ▁he
      {"\xe2\x96\x81hello", -1},  // 271: ▁hello
      {"\xe2\x96\x81w", -3.2},    // 272: ▁w
      {"or", -3.5},               // 273
      {"ld", -3.6},               // 274
      {"<tool>", 0},              // 275: user-defined
  };
  for (const auto& [piece, score] : pieces) {
    tokens.push_back(piece);
    types.push_back(piece == "<tool>" ? 4 : 1);
    scores.push_back(score);
  }
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_strings("tokenizer.ggml.tokens", tokens);
  w.add_f32s("tokenizer.ggml.scores", scores);
  w.add_i32s("tokenizer.ggml.token_type", types);
  w.add_u32("tokenizer.ggml.bos_token_id", 1);
  w.add_u32("tokenizer.ggml.eos_token_id", 2);
  w.add_u32("tokenizer.ggml.unknown_token_id", 0);
  w.add_bool("tokenizer.ggml.add_bos_token", add_bos);
  return w;
}

std::shared_ptr<const text::Tokenizer> load_spm(const std::string& name, const Writer& w) {
  const auto path = temp_dir() / (name + ".gguf");
  w.write(path);
  auto loaded = loaders::load_tokenizer(path);
  if (!loaded) throw loaded.error();
  return loaded->tokenizer;
}

TEST(GgufTokenizer, SentencePieceVocabularyMergesByScoreAndFallsBackToBytes) {
  const auto tok = load_spm("spm", spm_writer());
  // "▁hello": ll (-2) first, then llo (-2.5), ▁h (-3), ▁he (-2.8), ▁hello (-1).
  // "▁world": ▁w (-3.2), or (-3.5), ld (-3.6); nothing longer exists.
  EXPECT_EQ(tok->encode("hello world", true).value(),
            (std::vector<std::uint32_t>{1, 271, 272, 273, 274}));
  EXPECT_EQ(tok->encode("hello world", false).value(),
            (std::vector<std::uint32_t>{271, 272, 273, 274}));
  // "é" is not a piece: its two UTF-8 bytes, as byte tokens 3 + 0xC3 and 3 + 0xA9.
  EXPECT_EQ(tok->encode("h\xc3\xa9", false).value(),
            (std::vector<std::uint32_t>{267, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(tok->decode(std::vector<std::uint32_t>{1, 271, 272, 273, 274}, true).value(),
            "hello world");
  EXPECT_EQ(tok->decode(std::vector<std::uint32_t>{267, 3 + 0xC3, 3 + 0xA9}, false).value(),
            "h\xc3\xa9");
  // Control tokens in the text are special; user-defined ones are whole tokens too.
  EXPECT_EQ(tok->encode("<s>hello", false).value(), (std::vector<std::uint32_t>{1, 271}));
  EXPECT_EQ(tok->encode("<tool>", false).value(), (std::vector<std::uint32_t>{275}));
  EXPECT_TRUE(tok->is_special(2));
  EXPECT_FALSE(tok->is_special(275));

  const auto no_bos = load_spm("spm-no-bos", spm_writer(false));
  EXPECT_EQ(no_bos->encode("hello", true).value(), (std::vector<std::uint32_t>{271}));
}

TEST(GgufTokenizer, BadTokenizerMetadataIsANamedError) {
  struct Case {
    const char* name;
    std::function<void(Writer&)> build;
    std::string message_has;
  };
  const std::vector<Case> cases = {
      {"no model", [](Writer& w) { w.add_strings("tokenizer.ggml.tokens", {"a"}); },
       "\"tokenizer.ggml.model\" is missing"},
      {"bert",
       [](Writer& w) {
         w.add_string("tokenizer.ggml.model", "bert");
         w.add_strings("tokenizer.ggml.tokens", {"a"});
       },
       "tokenizer.ggml.model \"bert\" is not supported"},
      {"types of another length",
       [](Writer& w) {
         w.add_string("tokenizer.ggml.model", "gpt2");
         w.add_strings("tokenizer.ggml.tokens", {"a", "b"});
         w.add_i32s("tokenizer.ggml.token_type", {1});
         w.add_strings("tokenizer.ggml.merges", {});
       },
       "\"tokenizer.ggml.token_type\" must be an array of 2 numbers"},
      // Found by fuzz_gguf (2026-11-26): a type of 4e9 was cast to int, undefined behaviour.
      {"type not a token type",
       [](Writer& w) {
         w.add_string("tokenizer.ggml.model", "gpt2");
         w.add_strings("tokenizer.ggml.tokens", {"a", "b"});
         w.add_f32s("tokenizer.ggml.token_type", {1.0f, 4294967296.0f});
         w.add_strings("tokenizer.ggml.merges", {});
       },
       "\"tokenizer.ggml.token_type\" holds 4.29497e+09 for token 1, not a token type (0-6)"},
      {"type a fraction",
       [](Writer& w) {
         w.add_string("tokenizer.ggml.model", "gpt2");
         w.add_strings("tokenizer.ggml.tokens", {"a", "b"});
         w.add_f32s("tokenizer.ggml.token_type", {2.5f, 1.0f});
         w.add_strings("tokenizer.ggml.merges", {});
       },
       "holds 2.5 for token 0, not a token type"},
      {"bos outside",
       [](Writer& w) {
         w.add_string("tokenizer.ggml.model", "gpt2");
         w.add_strings("tokenizer.ggml.tokens", {"a", "b"});
         w.add_strings("tokenizer.ggml.merges", {});
         w.add_u32("tokenizer.ggml.bos_token_id", 7);
       },
       "\"tokenizer.ggml.bos_token_id\" is 7, outside the 2 tokens"},
      {"merge without space",
       [](Writer& w) {
         w.add_string("tokenizer.ggml.model", "gpt2");
         w.add_strings("tokenizer.ggml.tokens", {"a", "b", "ab"});
         w.add_strings("tokenizer.ggml.merges", {"ab"});
       },
       "entry 0 \"ab\" is not two tokens"},
      {"merge naming an unknown token",
       [](Writer& w) {
         w.add_string("tokenizer.ggml.model", "gpt2");
         w.add_strings("tokenizer.ggml.tokens", {"a", "b", "ab"});
         w.add_strings("tokenizer.ggml.merges", {"a c"});
       },
       "tokenizer metadata"},
      {"llama without scores",
       [](Writer& w) {
         w.add_string("tokenizer.ggml.model", "llama");
         w.add_strings("tokenizer.ggml.tokens", {"a"});
       },
       "\"tokenizer.ggml.scores\" is missing"},
  };
  for (const Case& c : cases) {
    Writer w;
    c.build(w);
    const auto path = temp_dir() / "bad-tokenizer.gguf";
    w.write(path);
    auto loaded = loaders::load_tokenizer(path);
    ASSERT_FALSE(loaded) << c.name;
    const std::string message = loaded.error().what();
    EXPECT_NE(message.find(path.string()), std::string::npos) << c.name << ": " << message;
    EXPECT_NE(message.find(c.message_has), std::string::npos) << c.name << ": " << message;
  }
}

// Real vocabularies (scripts/fetch-test-data): written into GGUF metadata the way llama.cpp's
// converter writes them, they must encode like their tokenizer.json.
std::filesystem::path fetched(const std::string& name) {
  return std::filesystem::path(WEFT_BINARY_DIR) / "test-data/tokenizers" / name;
}

struct JsonVocabulary {
  std::vector<std::string> tokens;
  std::vector<std::int32_t> types;
  std::vector<std::string> merges;
};

JsonVocabulary read_vocabulary(const std::filesystem::path& tokenizer_json) {
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.load(tokenizer_json.string()).value();
  JsonVocabulary v;
  auto put = [&](std::size_t id, std::string_view text, std::int32_t type) {
    if (id >= v.tokens.size()) {
      v.tokens.resize(id + 1);
      v.types.resize(id + 1, 1);
    }
    v.tokens[id] = std::string(text);
    v.types[id] = type;
  };
  for (auto field : root["model"]["vocab"].get_object()) {
    const std::string_view token = field.key;
    const bool byte = token.size() == 6 && token.substr(0, 3) == "<0x" && token.back() == '>';
    put(field.value.get_uint64().value(), token, byte ? 6 : 1);
  }
  for (auto added : root["added_tokens"].get_array()) {
    const bool special = added["special"].get_bool().value();
    put(added["id"].get_uint64().value(), added["content"].get_string().value(), special ? 3 : 4);
  }
  for (auto m : root["model"]["merges"].get_array()) {
    std::string_view text;
    if (!m.get(text)) {
      v.merges.emplace_back(text);
    } else {
      v.merges.push_back(std::string(m.at(0).get_string().value()) + " " +
                         std::string(m.at(1).get_string().value()));
    }
  }
  return v;
}

void expect_same_encoding(const text::Tokenizer& got, const text::Tokenizer& want) {
  std::vector<std::string> samples = kSamples;
  samples.push_back("   multiple   spaces\n\n\nand newlines  ");
  samples.push_back("<s>[INST] What's 2+2? [/INST]");
  samples.push_back("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
  samples.push_back(
      "Fran\xc3\xa7"
      "ais, \xd0\xa0\xd1\x83\xd1\x81\xd1\x81\xd0\xba\xd0\xb8\xd0\xb9, "
      "\xe4\xb8\xad\xe6\x96\x87, \xf0\x9f\xa6\x80 and code: for (int i=0;i<10;++i){}");
  for (const auto& text : samples) {
    for (bool special : {false, true}) {
      auto a = got.encode(text, special);
      auto b = want.encode(text, special);
      ASSERT_TRUE(a && b) << text;
      EXPECT_EQ(*a, *b) << "\"" << text << "\" special " << special;
      EXPECT_EQ(got.decode(*a, false).value(), want.decode(*b, false).value()) << text;
    }
  }
}

TEST(GgufTokenizer, RealLlama2VocabularyAsSentencePieceEncodesLikeItsTokenizerJson) {
  const auto json = fetched("llama2") / "tokenizer.json";
  if (!std::filesystem::exists(json)) {
    GTEST_SKIP() << json << " is missing: run scripts/fetch-test-data " << WEFT_BINARY_DIR;
  }
  const JsonVocabulary v = read_vocabulary(json);
  // tokenizer.json keeps no scores. A piece's score is the rank of the first merge that makes
  // it, negated (what SentencePiece's scores order; Llama's whitespace pieces, scored -1e9 in
  // its tokenizer.model, sit at the end of the merges): the derived merges must then reproduce
  // tokenizer.json's, and the whole pipeline its ids.
  std::vector<float> scores(v.tokens.size(), -1e9f);
  std::vector<std::int32_t> types = v.types;
  types[0] = 2;  // <unk>
  std::unordered_map<std::string, std::size_t> ids;
  for (std::size_t id = 0; id < v.tokens.size(); ++id)
    ids.emplace(v.tokens[id], id);
  for (std::size_t rank = v.merges.size(); rank-- > 0;) {
    const std::string& m = v.merges[rank];
    const std::size_t space = m.find(' ', 1);
    auto it = ids.find(m.substr(0, space) + m.substr(space + 1));
    if (it != ids.end()) scores[it->second] = -static_cast<float>(rank);
  }
  Writer w;
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_strings("tokenizer.ggml.tokens", v.tokens);
  w.add_f32s("tokenizer.ggml.scores", scores);
  w.add_i32s("tokenizer.ggml.token_type", types);
  w.add_u32("tokenizer.ggml.bos_token_id", 1);
  w.add_u32("tokenizer.ggml.eos_token_id", 2);
  w.add_u32("tokenizer.ggml.unknown_token_id", 0);
  w.add_bool("tokenizer.ggml.add_bos_token", true);
  const auto got = load_spm("llama2-spm", w);
  auto want = loaders::load_tokenizer(json);
  ASSERT_TRUE(want) << want.error().what();
  expect_same_encoding(*got, *want->tokenizer);
}

TEST(GgufTokenizer, RealLlama3VocabularyAsGpt2WithLlamaBpeEncodesLikeItsTokenizerJson) {
  const auto json = fetched("llama3") / "tokenizer.json";
  if (!std::filesystem::exists(json)) {
    GTEST_SKIP() << json << " is missing: run scripts/fetch-test-data " << WEFT_BINARY_DIR;
  }
  const JsonVocabulary v = read_vocabulary(json);
  Writer w;
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "llama-bpe");
  w.add_strings("tokenizer.ggml.tokens", v.tokens);
  w.add_i32s("tokenizer.ggml.token_type", v.types);
  w.add_strings("tokenizer.ggml.merges", v.merges);
  w.add_u32("tokenizer.ggml.bos_token_id", 128000);
  w.add_u32("tokenizer.ggml.eos_token_id", 128001);
  w.add_bool("tokenizer.ggml.add_bos_token", false);  // this tokenizer.json adds no bos
  const auto got = load_spm("llama3-bpe", w);
  auto want = loaders::load_tokenizer(json);
  ASSERT_TRUE(want) << want.error().what();
  expect_same_encoding(*got, *want->tokenizer);
}

// Every fuzz_gguf finding (tests/fixtures/fuzz_findings/gguf/) builds its tokenizer or is
// refused with an error naming the file; under the asan preset, without undefined behaviour.
TEST(GgufTokenizer, FuzzFindingsLoadOrFailCleanly) {
  const auto dir = std::filesystem::path(WEFT_SOURCE_DIR) / "tests/fixtures/fuzz_findings/gguf";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ++files;
    const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(raw.data()),
                                           raw.size());
    auto file = File::parse(bytes, entry.path().filename().string());
    ASSERT_TRUE(file) << file.error().what();  // the findings are all well-formed files
    auto json = gguf_tokenizer_json(**file);
    if (!json) {
      EXPECT_NE(std::string(json.error().what()).find(entry.path().filename().string()),
                std::string::npos)
          << json.error().what();
    }
  }
  EXPECT_GE(files, 1);
}

}  // namespace
}  // namespace weft::gguf::testing
