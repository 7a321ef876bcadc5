#include "runtime/text/added_vocabulary.hpp"

#include "runtime/text/normalizers.hpp"
#include "runtime/text/unicode.hpp"
#include "runtime/text/utf8.hpp"

namespace weft::text {
namespace {

char32_t last_code_point(std::string_view text) {
  std::size_t start = text.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80)
    --start;
  return next_code_point(text, start);
}

// Offset where the run of whitespace that ends `text` begins (Rust regex \s*$).
std::size_t trailing_space_start(std::string_view text) {
  std::size_t end = text.size();
  while (end > 0) {
    std::size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80)
      --start;
    std::size_t pos = start;
    if (!is_whitespace(next_code_point(text, pos))) break;
    end = start;
  }
  return end;
}

// Length of the whitespace run that starts `text` (Rust regex ^\s*).
std::size_t leading_space_length(std::string_view text) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t next = pos;
    if (!is_whitespace(next_code_point(text, next))) break;
    pos = next;
  }
  return pos;
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view key, std::int32_t token_index) {
  if (key.empty()) return;
  std::uint32_t node = 0;
  for (unsigned char b : key) {
    const std::uint64_t edge = (static_cast<std::uint64_t>(node) << 8) | b;
    auto it = children.find(edge);
    if (it == children.end()) {
      const auto next = static_cast<std::uint32_t>(terminal.size());
      terminal.push_back(-1);
      it = children.emplace(edge, next).first;
    }
    node = it->second;
  }
  if (terminal[node] < 0) terminal[node] = token_index;
  first_byte[static_cast<unsigned char>(key[0])] = true;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer)
    : tokens_(std::move(tokens)) {
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    auto& t = tokens_[i];
    t.decode_form = t.content;
    if (t.normalized && normalizer != nullptr) normalizer->normalize(t.decode_form);
    by_id_[t.id] = i;
    by_content_[t.content] = i;
    if (t.normalized) {
      normalized_.insert(t.decode_form, static_cast<std::int32_t>(i));
    } else {
      raw_.insert(t.content, static_cast<std::int32_t>(i));
    }
  }
}

bool AddedVocabulary::is_special_content(std::string_view content) const {
  const AddedToken* t = find_content(content);
  return t != nullptr && t->special;
}

void AddedVocabulary::split(std::string_view text, bool normalized_tokens,
                            std::vector<Segment>& out) const {
  const Trie& t = trie(normalized_tokens);
  std::size_t emitted = 0;  // end of what is already in `out`
  const auto push_text = [&](std::size_t begin, std::size_t end) {
    if (end > begin) out.push_back({text.substr(begin, end - begin), -1, begin});
  };
  for (std::size_t pos = 0; pos < text.size();) {
    if (!t.first_byte[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    // Longest token starting here.
    std::int32_t best = -1;
    std::size_t best_end = 0;
    std::uint32_t node = 0;
    for (std::size_t k = pos; k < text.size(); ++k) {
      auto it = t.children.find((static_cast<std::uint64_t>(node) << 8) |
                                static_cast<unsigned char>(text[k]));
      if (it == t.children.end()) break;
      node = it->second;
      if (t.terminal[node] >= 0) {
        best = t.terminal[node];
        best_end = k + 1;
      }
    }
    if (best < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[static_cast<std::size_t>(best)];
    std::size_t start = pos, stop = best_end;
    pos = best_end;  // the matcher resumes after this match even when it is rejected below
    if (token.single_word) {
      const bool word_before = start > 0 && is_word_char(last_code_point(text.substr(0, start)));
      std::size_t after = stop;
      const bool word_after = stop < text.size() && is_word_char(next_code_point(text, after));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), emitted);
    if (token.rstrip) stop += leading_space_length(text.substr(stop));
    push_text(emitted, start);
    out.push_back({text.substr(start, stop - start), static_cast<std::int64_t>(token.id), start});
    emitted = stop;
    pos = std::max(pos, stop);
  }
  push_text(emitted, text.size());
}

}  // namespace weft::text
