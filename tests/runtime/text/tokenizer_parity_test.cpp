// Exact parity with Hugging Face `tokenizers` 0.23.2 on the committed corpus: ids with and
// without special tokens, decode with and without skip_special_tokens, decode of a suffix.
// The references were made by tests/fixtures/tokenizers/make_tokenizer_refs.py.

#include <gtest/gtest.h>
#include <simdjson.h>

#include <map>

#include "tests/runtime/text/text_test_data.hpp"

namespace weft::text::testing {
namespace {

struct Reference {
  std::string text;
  std::vector<std::uint32_t> ids, ids_special;
  std::string decode, decode_skip, decode_tail;
};

std::vector<Reference> read_references(const std::string& name) {
  std::vector<Reference> refs;
  const auto path = fixtures_dir() / "refs" / (name + ".jsonl");
  simdjson::padded_string content;
  if (auto error = simdjson::padded_string::load(path.string()).get(content); error) {
    ADD_FAILURE() << path << ": " << simdjson::error_message(error);
    return refs;
  }
  simdjson::dom::parser parser;
  simdjson::dom::document_stream stream;
  if (parser.parse_many(content).get(stream)) {
    ADD_FAILURE() << path << ": not JSON lines";
    return refs;
  }
  const auto ids = [](simdjson::dom::element e) {
    std::vector<std::uint32_t> out;
    for (auto v : e.get_array())
      out.push_back(static_cast<std::uint32_t>(v.get_uint64().value()));
    return out;
  };
  for (auto doc : stream) {
    simdjson::dom::element row = doc.value();
    Reference r;
    r.text = std::string(row["text"].get_string().value());
    r.ids = ids(row["ids"].value());
    r.ids_special = ids(row["ids_special"].value());
    r.decode = std::string(row["decode"].get_string().value());
    r.decode_skip = std::string(row["decode_skip"].get_string().value());
    r.decode_tail = std::string(row["decode_tail"].get_string().value());
    refs.push_back(std::move(r));
  }
  return refs;
}

class TokenizerParity : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerParity, MatchesHuggingFaceTokenizers) {
  const auto* loaded = load(GetParam());
  ASSERT_NE(loaded, nullptr);
  const Tokenizer& tok = *loaded->tokenizer;
  const auto refs = read_references(GetParam());
  ASSERT_GT(refs.size(), 100u);
  int mismatches = 0;
  for (const auto& r : refs) {
    SCOPED_TRACE("text: \"" + r.text + "\"");
    auto plain = tok.encode(r.text, false);
    auto special = tok.encode(r.text, true);
    ASSERT_TRUE(plain.ok()) << plain.error().what();
    ASSERT_TRUE(special.ok()) << special.error().what();
    EXPECT_EQ(*plain, r.ids);
    EXPECT_EQ(*special, r.ids_special);
    auto decoded = tok.decode(r.ids_special, false);
    auto skipped = tok.decode(r.ids_special, true);
    ASSERT_TRUE(decoded.ok() && skipped.ok());
    EXPECT_EQ(*decoded, r.decode);
    EXPECT_EQ(*skipped, r.decode_skip);
    if (!r.ids.empty()) {
      auto tail = tok.decode(std::span(r.ids).subspan(1), false);
      ASSERT_TRUE(tail.ok());
      EXPECT_EQ(*tail, r.decode_tail);
    }
    mismatches += (*plain != r.ids) + (*special != r.ids_special) + (*decoded != r.decode) +
                  (*skipped != r.decode_skip);
  }
  EXPECT_EQ(mismatches, 0) << GetParam() << ": " << mismatches << " mismatches over " << refs.size()
                           << " corpus lines";
}

INSTANTIATE_TEST_SUITE_P(AllTokenizers, TokenizerParity, ::testing::ValuesIn(tokenizer_names()),
                         [](const auto& test_info) { return test_info.param; });

}  // namespace
}  // namespace weft::text::testing
