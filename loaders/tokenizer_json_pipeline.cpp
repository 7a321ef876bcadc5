// normalizer, pre_tokenizer, decoder and post_processor of tokenizer.json.
#include "loaders/tokenizer_json_components.hpp"
#include "runtime/text/precompiled_normalizer.hpp"

namespace weft::loaders {
namespace {

namespace dom = simdjson::dom;

[[noreturn]] void unsupported(const JsonNode& node, std::string_view kind, std::string_view type,
                              std::string_view supported) {
  throw Error(ErrorCode::kUnsupported, node.source + ": field " + node.field + ": " +
                                           std::string(kind) + " type \"" + std::string(type) +
                                           "\" is not supported by Weft (expected one of " +
                                           std::string(supported) + ")");
}

std::string_view type_of(const JsonNode& node) {
  return node.at("type").string();
}

// {"String": "..."} or {"Regex": "..."}: the Regex is compiled here so errors name the field.
struct Pattern {
  std::string literal;
  std::optional<text::Regex> regex;
};

Pattern read_pattern(const JsonNode& node) {
  Pattern p;
  if (auto s = node.find("String")) {
    p.literal = std::string(s->string());
  } else if (auto r = node.find("Regex")) {
    auto compiled = text::Regex::compile(r->string());
    if (!compiled)
      r->fail("a regular expression PCRE2 accepts (" + std::string(compiled.error().what()) + ")");
    p.regex = std::move(*compiled);
  } else {
    node.fail("{\"String\": ...} or {\"Regex\": ...}");
  }
  return p;
}

text::SplitBehavior read_behavior(const JsonNode& node) {
  const std::string_view b = node.string();
  if (b == "Removed") return text::SplitBehavior::kRemoved;
  if (b == "Isolated") return text::SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return text::SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return text::SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return text::SplitBehavior::kContiguous;
  node.fail("one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

// prepend_scheme (tokenizers >= 0.14) or the older add_prefix_space.
text::PrependScheme read_prepend_scheme(const JsonNode& node) {
  if (auto s = node.find("prepend_scheme")) {
    const std::string_view v = s->string();
    if (v == "always") return text::PrependScheme::kAlways;
    if (v == "first") return text::PrependScheme::kFirst;
    if (v == "never") return text::PrependScheme::kNever;
    s->fail("one of always, first, never");
  }
  return node.boolean_or("add_prefix_space", true) ? text::PrependScheme::kAlways
                                                   : text::PrependScheme::kNever;
}

std::string read_char(const JsonNode& node) {
  std::string s(node.string());
  if (s.empty()) node.fail("a one-character string");
  return s;
}

template <class Fn>
void for_each_item(const JsonNode& list, Fn&& fn) {
  std::size_t i = 0;
  for (dom::element e : list.array())
    fn(list.at(i++, e));
}

}  // namespace

std::unique_ptr<text::Normalizer> build_normalizer(const JsonNode& node) {
  const std::string_view type = type_of(node);
  if (type == "NFC") return std::make_unique<text::UnicodeNormalizer>(text::NormalForm::kNfc);
  if (type == "NFD") return std::make_unique<text::UnicodeNormalizer>(text::NormalForm::kNfd);
  if (type == "NFKC") return std::make_unique<text::UnicodeNormalizer>(text::NormalForm::kNfkc);
  if (type == "NFKD") return std::make_unique<text::UnicodeNormalizer>(text::NormalForm::kNfkd);
  if (type == "Lowercase") return std::make_unique<text::LowercaseNormalizer>();
  if (type == "StripAccents") return std::make_unique<text::StripAccentsNormalizer>();
  if (type == "Strip") {
    return std::make_unique<text::StripNormalizer>(node.boolean_or("strip_left", true),
                                                   node.boolean_or("strip_right", true));
  }
  if (type == "Prepend")
    return std::make_unique<text::PrependNormalizer>(std::string(node.at("prepend").string()));
  if (type == "Replace") {
    Pattern p = read_pattern(node.at("pattern"));
    std::string content(node.at("content").string());
    if (p.regex)
      return std::make_unique<text::ReplaceNormalizer>(std::move(*p.regex), std::move(content));
    return std::make_unique<text::ReplaceNormalizer>(std::move(p.literal), std::move(content));
  }
  if (type == "BertNormalizer") {
    std::optional<bool> strip_accents;
    if (auto s = node.find("strip_accents")) strip_accents = s->boolean();
    return std::make_unique<text::BertNormalizer>(
        node.boolean_or("clean_text", true), node.boolean_or("handle_chinese_chars", true),
        strip_accents, node.boolean_or("lowercase", true));
  }
  if (type == "Precompiled") {
    const JsonNode field = node.at("precompiled_charsmap");
    auto bytes = text::decode_base64(field.string());
    if (!bytes) field.fail("base64 text");
    auto normalizer = text::PrecompiledNormalizer::create(*bytes);
    if (!normalizer)
      field.fail(std::string("a valid SentencePiece charsmap (") + normalizer.error().what() + ")");
    return std::make_unique<text::PrecompiledNormalizer>(std::move(*normalizer));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<text::Normalizer>> steps;
    for_each_item(node.at("normalizers"),
                  [&](const JsonNode& n) { steps.push_back(build_normalizer(n)); });
    return std::make_unique<text::SequenceNormalizer>(std::move(steps));
  }
  unsupported(node, "normalizer", type,
              "NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, Strip, Prepend, Replace, "
              "BertNormalizer, Precompiled, Sequence");
}

std::unique_ptr<text::PreTokenizer> build_pre_tokenizer(const JsonNode& node) {
  const std::string_view type = type_of(node);
  if (type == "Split") {
    Pattern p = read_pattern(node.at("pattern"));
    const auto behavior = read_behavior(node.at("behavior"));
    const bool invert = node.boolean_or("invert", false);
    if (p.regex)
      return std::make_unique<text::SplitPreTokenizer>(std::move(*p.regex), behavior, invert);
    return std::make_unique<text::SplitPreTokenizer>(std::move(p.literal), behavior, invert);
  }
  if (type == "ByteLevel") {
    return std::make_unique<text::ByteLevelPreTokenizer>(node.boolean_or("add_prefix_space", true),
                                                         node.boolean_or("use_regex", true));
  }
  if (type == "Metaspace") {
    return std::make_unique<text::MetaspacePreTokenizer>(read_char(node.at("replacement")),
                                                         read_prepend_scheme(node),
                                                         node.boolean_or("split", true));
  }
  if (type == "Whitespace") return std::make_unique<text::WhitespacePreTokenizer>();
  if (type == "WhitespaceSplit") {
    return std::make_unique<text::CharClassPreTokenizer>(
        [](char32_t c) { return text::is_whitespace(c); }, text::SplitBehavior::kRemoved);
  }
  if (type == "BertPreTokenizer") {
    std::vector<std::unique_ptr<text::PreTokenizer>> steps;
    steps.push_back(std::make_unique<text::CharClassPreTokenizer>(
        [](char32_t c) { return text::is_whitespace(c); }, text::SplitBehavior::kRemoved));
    steps.push_back(std::make_unique<text::CharClassPreTokenizer>(text::is_bert_punctuation,
                                                                  text::SplitBehavior::kIsolated));
    return std::make_unique<text::SequencePreTokenizer>(std::move(steps));
  }
  if (type == "Punctuation") {
    auto behavior = text::SplitBehavior::kIsolated;
    if (auto b = node.find("behavior")) behavior = read_behavior(*b);
    return std::make_unique<text::CharClassPreTokenizer>(text::is_bert_punctuation, behavior);
  }
  if (type == "Digits") {
    return std::make_unique<text::CharClassPreTokenizer>(text::is_numeric,
                                                         node.boolean_or("individual_digits", false)
                                                             ? text::SplitBehavior::kIsolated
                                                             : text::SplitBehavior::kContiguous);
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<text::PreTokenizer>> steps;
    for_each_item(node.at("pretokenizers"),
                  [&](const JsonNode& n) { steps.push_back(build_pre_tokenizer(n)); });
    return std::make_unique<text::SequencePreTokenizer>(std::move(steps));
  }
  unsupported(node, "pre_tokenizer", type,
              "Split, ByteLevel, Metaspace, Whitespace, WhitespaceSplit, BertPreTokenizer, "
              "Punctuation, Digits, Sequence");
}

std::unique_ptr<text::Decoder> build_decoder(const JsonNode& node) {
  const std::string_view type = type_of(node);
  if (type == "ByteLevel") return std::make_unique<text::ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<text::ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<text::FuseDecoder>();
  if (type == "Replace") {
    Pattern p = read_pattern(node.at("pattern"));
    if (p.regex) node.at("pattern").fail("a String pattern (the Replace decoder takes no Regex)");
    return std::make_unique<text::ReplaceDecoder>(std::move(p.literal),
                                                  std::string(node.at("content").string()));
  }
  if (type == "Strip") {
    return std::make_unique<text::StripDecoder>(read_char(node.at("content")),
                                                node.at("start").unsigned_integer(),
                                                node.at("stop").unsigned_integer());
  }
  if (type == "Metaspace") {
    return std::make_unique<text::MetaspaceDecoder>(read_char(node.at("replacement")),
                                                    read_prepend_scheme(node));
  }
  if (type == "WordPiece") {
    return std::make_unique<text::WordPieceDecoder>(node.string_or("prefix", "##"),
                                                    node.boolean_or("cleanup", true));
  }
  if (type == "BPEDecoder")
    return std::make_unique<text::BpeSuffixDecoder>(node.string_or("suffix", "</w>"));
  if (type == "Sequence") {
    std::vector<std::unique_ptr<text::Decoder>> steps;
    for_each_item(node.at("decoders"),
                  [&](const JsonNode& n) { steps.push_back(build_decoder(n)); });
    return std::make_unique<text::SequenceDecoder>(std::move(steps));
  }
  unsupported(node, "decoder", type,
              "ByteLevel, ByteFallback, Fuse, Replace, Strip, Metaspace, WordPiece, BPEDecoder, "
              "Sequence");
}

std::unique_ptr<text::PostProcessor> build_post_processor(const JsonNode& node,
                                                          const text::TokenizerParts& parts) {
  const std::string_view type = type_of(node);
  if (type == "ByteLevel") return std::make_unique<text::NoOpPostProcessor>();
  if (type == "TemplateProcessing") {
    const JsonNode specials = node.at("special_tokens");
    std::vector<std::uint32_t> before, after;
    bool seen_sequence = false;
    for_each_item(node.at("single"), [&](const JsonNode& item) {
      if (auto seq = item.find("Sequence")) {
        if (seq->at("id").string() != "A")
          seq->at("id").fail("\"A\" in the single-sequence template");
        seen_sequence = true;
        return;
      }
      auto special = item.find("SpecialToken");
      if (!special) item.fail("{\"SpecialToken\": ...} or {\"Sequence\": ...}");
      const std::string name(special->at("id").string());
      auto entry = specials.find(name.c_str());
      if (!entry) special->at("id").fail("a token listed in special_tokens");
      for_each_item(entry->at("ids"), [&](const JsonNode& id) {
        (seen_sequence ? after : before)
            .push_back(static_cast<std::uint32_t>(id.unsigned_integer()));
      });
    });
    return std::make_unique<text::TemplatePostProcessor>(std::move(before), std::move(after));
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    // "sep": ["[SEP]", 102], "cls": ["[CLS]", 101]
    const auto id_of = [](const JsonNode& pair) {
      auto items = pair.array();
      if (items.size() != 2) pair.fail("a [token, id] pair");
      return static_cast<std::uint32_t>(pair.at(1, items.at(1).value()).unsigned_integer());
    };
    return std::make_unique<text::TemplatePostProcessor>(
        std::vector<std::uint32_t>{id_of(node.at("cls"))},
        std::vector<std::uint32_t>{id_of(node.at("sep"))});
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<text::PostProcessor>> steps;
    for_each_item(node.at("processors"),
                  [&](const JsonNode& n) { steps.push_back(build_post_processor(n, parts)); });
    return std::make_unique<text::SequencePostProcessor>(std::move(steps));
  }
  unsupported(node, "post_processor", type,
              "TemplateProcessing, ByteLevel, BertProcessing, RobertaProcessing, Sequence");
}

}  // namespace weft::loaders
