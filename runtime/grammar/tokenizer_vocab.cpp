#include "runtime/grammar/tokenizer_vocab.hpp"

#include <simdjson.h>

#include <array>

namespace weft::grammar {
namespace {

// GPT-2's bytes_to_unicode(): printable bytes map to themselves, the rest to U+0100 upwards.
std::array<int, 0x200> unicode_to_byte_table() {
  std::array<int, 0x200> table;
  table.fill(-1);
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    int cp = printable ? b : 256 + next++;
    table[cp] = b;
  }
  return table;
}

bool decode_utf8(std::string_view s, std::size_t& i, std::uint32_t& cp) {
  auto c = static_cast<unsigned char>(s[i]);
  std::size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  if (i + n > s.size()) return false;
  cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
  for (std::size_t k = 1; k < n; ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return true;
}

}  // namespace

Result<TokenizerVocab> vocab_from_tokenizer_json(std::string_view json) {
  simdjson::dom::parser parser;
  simdjson::padded_string text(json);
  simdjson::dom::element doc;
  if (auto err = parser.parse(text).get(doc))
    return Error(ErrorCode::kParse,
                 std::string("tokenizer.json is not valid JSON: ") + simdjson::error_message(err));
  simdjson::dom::object vocab;
  if (doc["model"]["vocab"].get(vocab))
    return Error(ErrorCode::kUnsupported,
                 "tokenizer.json: model.vocab is not an object of token -> id (only BPE-style "
                 "vocabularies are read)");
  bool byte_fallback = false;
  if (doc["model"]["byte_fallback"].get(byte_fallback)) byte_fallback = false;  // absent: not set
  static const auto table = unicode_to_byte_table();

  TokenizerVocab out;
  auto place = [&](std::uint64_t id, std::string bytes, bool special) -> Result<void> {
    if (id > 10'000'000)
      return Error(ErrorCode::kOutOfRange,
                   "tokenizer.json: token id " + std::to_string(id) + " is too large");
    if (out.tokens.size() <= id) {
      out.tokens.resize(id + 1);
      out.special.resize(id + 1, false);
    }
    out.tokens[id] = std::move(bytes);
    out.special[id] = special;
    return {};
  };
  for (auto [key, value] : vocab) {
    std::uint64_t id;
    if (value.get(id))
      return Error(ErrorCode::kParse,
                   "tokenizer.json: vocab id of '" + std::string(key) + "' is not an integer");
    std::string bytes;
    if (byte_fallback) {
      if (key.size() == 6 && key.starts_with("<0x") && key.ends_with(">")) {
        bytes += static_cast<char>(std::stoi(std::string(key.substr(3, 2)), nullptr, 16));
      } else {
        for (std::size_t i = 0; i < key.size();) {
          if (key.substr(i).starts_with("\xE2\x96\x81")) {  // '▁' is a space
            bytes += ' ';
            i += 3;
          } else {
            bytes += key[i++];
          }
        }
      }
    } else {
      for (std::size_t i = 0; i < key.size();) {
        std::uint32_t cp;
        if (!decode_utf8(key, i, cp) || cp >= table.size() || table[cp] < 0)
          return Error(ErrorCode::kParse, "tokenizer.json: vocab entry '" + std::string(key) +
                                              "' is not byte-level BPE text");
        bytes += static_cast<char>(table[cp]);
      }
    }
    auto r = place(id, std::move(bytes), false);
    if (!r) return r.error();
  }
  simdjson::dom::array added;
  if (!doc["added_tokens"].get(added)) {
    for (auto t : added) {
      std::uint64_t id;
      std::string_view content;
      bool special = false;
      if (t["id"].get(id) || t["content"].get(content))
        return Error(ErrorCode::kParse, "tokenizer.json: an added token lacks id or content");
      if (t["special"].get(special)) special = false;  // absent: not special
      auto r = place(id, std::string(content), special);
      if (!r) return r.error();
    }
  }
  return out;
}

}  // namespace weft::grammar
