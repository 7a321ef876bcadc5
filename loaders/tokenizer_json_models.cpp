// The model of tokenizer.json: BPE, WordPiece or Unigram.
#include "loaders/tokenizer_json_components.hpp"
#include "runtime/text/bpe_model.hpp"
#include "runtime/text/unigram_model.hpp"
#include "runtime/text/wordpiece_model.hpp"

namespace weft::loaders {
namespace {

namespace dom = simdjson::dom;

text::Vocabulary read_vocab_object(const JsonNode& node) {
  std::vector<std::pair<std::string, std::uint32_t>> entries;
  for (auto [key, value] : node.object()) {
    JsonNode v{value, node.source, node.field + "[\"" + std::string(key) + "\"]"};
    const std::uint64_t id = v.unsigned_integer();
    if (id >= kMaxTokenId) v.fail(kMaxTokenIdText);
    entries.emplace_back(std::string(key), static_cast<std::uint32_t>(id));
  }
  return text::Vocabulary(std::move(entries));
}

template <class T>
T take(Result<T> result, const JsonNode& node) {
  if (!result) {
    throw Error(ErrorCode::kParse,
                node.source + ": field " + node.field + ": " + result.error().what());
  }
  return std::move(*result);
}

std::unique_ptr<text::Model> build_bpe(const JsonNode& node) {
  text::BpeOptions options;
  if (auto unk = node.find("unk_token")) options.unk_token = std::string(unk->string());
  options.continuing_subword_prefix = node.string_or("continuing_subword_prefix", "");
  options.end_of_word_suffix = node.string_or("end_of_word_suffix", "");
  options.fuse_unk = node.boolean_or("fuse_unk", false);
  options.byte_fallback = node.boolean_or("byte_fallback", false);
  options.ignore_merges = node.boolean_or("ignore_merges", false);
  if (auto dropout = node.find("dropout"); dropout && dropout->number() > 0.0) {
    dropout->fail("null or 0 (BPE dropout is for training; Weft encodes deterministically)");
  }
  std::vector<std::pair<std::string, std::string>> merges;
  if (auto list = node.find("merges")) {
    std::size_t i = 0;
    for (dom::element e : list->array()) {
      JsonNode m = list->at(i++, e);
      std::string_view line;
      if (e.get_string().get(line) == simdjson::SUCCESS) {
        const std::size_t space = line.find(' ');
        if (space == std::string_view::npos ||
            line.find(' ', space + 1) != std::string_view::npos) {
          m.fail("\"left right\" (two tokens separated by one space)");
        }
        merges.emplace_back(std::string(line.substr(0, space)),
                            std::string(line.substr(space + 1)));
        continue;
      }
      auto pair = m.array();
      if (pair.size() != 2) m.fail("a string \"left right\" or a pair [left, right]");
      merges.emplace_back(std::string(m.at(0, pair.at(0).value()).string()),
                          std::string(m.at(1, pair.at(1).value()).string()));
    }
  }
  return std::make_unique<text::BpeModel>(
      take(text::BpeModel::create(read_vocab_object(node.at("vocab")), merges, std::move(options)),
           node));
}

std::unique_ptr<text::Model> build_wordpiece(const JsonNode& node) {
  return std::make_unique<text::WordPieceModel>(
      take(text::WordPieceModel::create(read_vocab_object(node.at("vocab")),
                                        node.string_or("unk_token", "[UNK]"),
                                        node.string_or("continuing_subword_prefix", "##"),
                                        node.find("max_input_chars_per_word")
                                            ? node.at("max_input_chars_per_word").unsigned_integer()
                                            : 100),
           node));
}

std::unique_ptr<text::Model> build_unigram(const JsonNode& node) {
  std::vector<std::pair<std::string, double>> pieces;
  const JsonNode vocab = node.at("vocab");
  std::size_t i = 0;
  for (dom::element e : vocab.array()) {
    JsonNode entry = vocab.at(i++, e);
    auto pair = entry.array();
    if (pair.size() != 2) entry.fail("a [piece, score] pair");
    pieces.emplace_back(std::string(entry.at(0, pair.at(0).value()).string()),
                        entry.at(1, pair.at(1).value()).number());
  }
  std::optional<std::uint32_t> unk_id;
  if (auto unk = node.find("unk_id")) unk_id = static_cast<std::uint32_t>(unk->unsigned_integer());
  return std::make_unique<text::UnigramModel>(
      take(text::UnigramModel::create(std::move(pieces), unk_id,
                                      node.boolean_or("byte_fallback", false)),
           node));
}

}  // namespace

std::unique_ptr<text::Model> build_model(const JsonNode& node) {
  std::string_view type;
  if (auto t = node.find("type")) {
    type = t->string();
  } else {
    // Files written before tokenizers 0.11 carry no model type: tell the models apart by shape.
    dom::array array;
    if (node.find("merges")) {
      type = "BPE";
    } else if (node.at("vocab").value.get_array().get(array) == simdjson::SUCCESS) {
      type = "Unigram";
    } else {
      type = "WordPiece";
    }
  }
  if (type == "BPE") return build_bpe(node);
  if (type == "WordPiece") return build_wordpiece(node);
  if (type == "Unigram") return build_unigram(node);
  throw Error(ErrorCode::kUnsupported,
              node.source + ": field " + node.field + ": model type \"" + std::string(type) +
                  "\" is not supported by Weft (expected BPE, WordPiece or Unigram)");
}

}  // namespace weft::loaders
