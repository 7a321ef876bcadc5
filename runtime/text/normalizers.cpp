#include "runtime/text/normalizers.hpp"

#include "runtime/text/utf8.hpp"

namespace weft::text {
namespace {

// The CJK ranges BERT pads with spaces (tokenizers' is_chinese_char).
bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  if (from.empty() || text.find(from) == std::string::npos) return;
  std::string out;
  out.reserve(text.size());
  std::size_t pos = 0;
  for (std::size_t hit; (hit = text.find(from, pos)) != std::string::npos;
       pos = hit + from.size()) {
    out.append(text, pos, hit - pos);
    out.append(to);
  }
  out.append(text, pos, std::string::npos);
  text = std::move(out);
}

}  // namespace

void UnicodeNormalizer::normalize(std::string& text) const {
  // ASCII is invariant under every normal form: skip the copy for the common case.
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      text = normalize_unicode(text, form_);
      return;
    }
  }
}

void LowercaseNormalizer::normalize(std::string& text) const {
  std::string out;
  out.reserve(text.size());
  for (std::size_t pos = 0; pos < text.size();)
    append_lowercase(out, next_code_point(text, pos));
  text = std::move(out);
}

void StripAccentsNormalizer::normalize(std::string& text) const {
  std::string out;
  out.reserve(text.size());
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t begin = pos;
    const char32_t c = next_code_point(text, pos);
    if (!(nonspacing_only_ ? is_nonspacing_mark(c) : is_mark(c)))
      out.append(text, begin, pos - begin);
  }
  text = std::move(out);
}

void StripNormalizer::normalize(std::string& text) const {
  std::size_t begin = 0, end = text.size();
  if (left_) {
    while (begin < end) {
      std::size_t pos = begin;
      if (!is_whitespace(next_code_point(text, pos))) break;
      begin = pos;
    }
  }
  if (right_) {
    while (end > begin) {
      std::size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80)
        --start;
      std::size_t pos = start;
      if (!is_whitespace(next_code_point(text, pos))) break;
      end = start;
    }
  }
  text = text.substr(begin, end - begin);
}

void PrependNormalizer::normalize(std::string& text) const {
  if (!text.empty()) text.insert(0, prefix_);
}

void ReplaceNormalizer::normalize(std::string& text) const {
  if (!regex_) {
    replace_all(text, literal_, content_);
    return;
  }
  const auto matches = regex_->find_all(text);
  if (matches.empty()) return;
  std::string out;
  std::size_t pos = 0;
  for (const auto& [begin, end] : matches) {
    out.append(text, pos, begin - pos);
    out.append(content_);
    pos = end;
  }
  out.append(text, pos, std::string::npos);
  text = std::move(out);
}

void BertNormalizer::normalize(std::string& text) const {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t begin = pos;
    const char32_t c = next_code_point(text, pos);
    if (clean_text_) {
      const bool control = c != '\t' && c != '\n' && c != '\r' && is_other(c);
      if (c == 0 || c == 0xFFFD || control) continue;
      if (c == '\t' || c == '\n' || c == '\r' || is_whitespace(c)) {
        out.push_back(' ');
        continue;
      }
    }
    if (handle_chinese_chars_ && is_chinese_char(c)) {
      out.push_back(' ');
      out.append(text, begin, pos - begin);
      out.push_back(' ');
      continue;
    }
    out.append(text, begin, pos - begin);
  }
  if (strip_accents_) {
    out = normalize_unicode(out, NormalForm::kNfd);
    StripAccentsNormalizer(/*nonspacing_only=*/true).normalize(out);
  }
  if (lowercase_) LowercaseNormalizer().normalize(out);
  text = std::move(out);
}

}  // namespace weft::text
