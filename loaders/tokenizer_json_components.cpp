#include "loaders/tokenizer_json_components.hpp"

#include "runtime/text/bpe_model.hpp"
#include "runtime/text/unigram_model.hpp"
#include "runtime/text/wordpiece_model.hpp"

namespace weft::loaders {

using simdjson::SUCCESS;
namespace dom = simdjson::dom;

void JsonNode::fail(const std::string& expected) const {
  throw Error(ErrorCode::kParse,
              source + ": field " + (field.empty() ? "(root)" : field) + ": expected " + expected);
}

std::optional<JsonNode> JsonNode::find(const char* key) const {
  dom::object obj;
  if (value.get_object().get(obj) != SUCCESS) fail("an object");
  dom::element child;
  if (obj[key].get(child) != SUCCESS || child.is_null()) return std::nullopt;
  return JsonNode{child, source, field.empty() ? key : field + "." + key};
}

JsonNode JsonNode::at(const char* key) const {
  auto child = find(key);
  if (!child) {
    JsonNode missing{value, source, field.empty() ? key : field + "." + key};
    missing.fail("a value (the field is missing or null)");
  }
  return *child;
}

JsonNode JsonNode::at(std::size_t index, dom::element element) const {
  return JsonNode{element, source, field + "[" + std::to_string(index) + "]"};
}

std::string_view JsonNode::string() const {
  std::string_view s;
  if (value.get_string().get(s) != SUCCESS) fail("a string");
  return s;
}

bool JsonNode::boolean() const {
  bool b = false;
  if (value.get_bool().get(b) != SUCCESS) fail("true or false");
  return b;
}

std::uint64_t JsonNode::unsigned_integer() const {
  std::uint64_t n = 0;
  if (value.get_uint64().get(n) != SUCCESS) fail("a non-negative integer");
  return n;
}

double JsonNode::number() const {
  double d = 0;
  if (value.get_double().get(d) == SUCCESS) return d;
  std::int64_t i = 0;
  if (value.get_int64().get(i) == SUCCESS) return static_cast<double>(i);
  fail("a number");
}

dom::array JsonNode::array() const {
  dom::array a;
  if (value.get_array().get(a) != SUCCESS) fail("an array");
  return a;
}

dom::object JsonNode::object() const {
  dom::object o;
  if (value.get_object().get(o) != SUCCESS) fail("an object");
  return o;
}

bool JsonNode::boolean_or(const char* key, bool fallback) const {
  auto child = find(key);
  return child ? child->boolean() : fallback;
}

std::string JsonNode::string_or(const char* key, std::string fallback) const {
  auto child = find(key);
  return child ? std::string(child->string()) : std::move(fallback);
}

std::unique_ptr<text::Tokenizer> build_tokenizer(const JsonNode& root) {
  root.object();
  text::TokenizerParts parts;
  parts.model = build_model(root.at("model"));
  if (auto n = root.find("normalizer")) parts.normalizer = build_normalizer(*n);
  if (auto n = root.find("pre_tokenizer")) parts.pre_tokenizer = build_pre_tokenizer(*n);
  if (auto n = root.find("decoder")) parts.decoder = build_decoder(*n);
  if (auto list = root.find("added_tokens")) {
    std::size_t i = 0;
    for (dom::element e : list->array()) {
      JsonNode t = list->at(i++, e);
      text::AddedToken token;
      token.content = std::string(t.at("content").string());
      const std::uint64_t id = t.at("id").unsigned_integer();
      if (id >= kMaxTokenId) t.at("id").fail(kMaxTokenIdText);
      token.id = static_cast<std::uint32_t>(id);
      token.single_word = t.boolean_or("single_word", false);
      token.lstrip = t.boolean_or("lstrip", false);
      token.rstrip = t.boolean_or("rstrip", false);
      token.special = t.boolean_or("special", false);
      token.normalized = t.boolean_or("normalized", !token.special);
      parts.added_tokens.push_back(std::move(token));
    }
  }
  if (auto n = root.find("post_processor")) parts.post_processor = build_post_processor(*n, parts);
  return std::make_unique<text::Tokenizer>(std::move(parts));
}

}  // namespace weft::loaders
