#include "runtime/text/decoders.hpp"

#include <unordered_map>

#include "runtime/text/utf8.hpp"

namespace weft::text {
namespace {

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::size_t pos = text.find(from);
  if (pos == std::string::npos) return;
  std::string out;
  std::size_t last = 0;
  for (; pos != std::string::npos; pos = text.find(from, last)) {
    out.append(text, last, pos - last);
    out.append(to);
    last = pos + from.size();
  }
  out.append(text, last, std::string::npos);
  text = std::move(out);
}

const std::unordered_map<char32_t, unsigned char>& byte_level_inverse() {
  static const auto table = [] {
    std::unordered_map<char32_t, unsigned char> t;
    const auto& alphabet = byte_level_alphabet();
    for (int b = 0; b < 256; ++b) {
      std::size_t pos = 0;
      t.emplace(next_code_point(alphabet[b], pos), static_cast<unsigned char>(b));
    }
    return t;
  }();
  return table;
}

}  // namespace

void ByteLevelDecoder::decode_chain(std::vector<std::string>& tokens) const {
  const auto& inverse = byte_level_inverse();
  std::string bytes;
  for (const auto& token : tokens) {
    // A token with any character outside the alphabet (an added token such as "<|im_end|>"
    // written in plain text is inside it) is taken as its own UTF-8 bytes.
    std::string mapped;
    bool all_mapped = true;
    for (std::size_t pos = 0; pos < token.size();) {
      auto it = inverse.find(next_code_point(token, pos));
      if (it == inverse.end()) {
        all_mapped = false;
        break;
      }
      mapped.push_back(static_cast<char>(it->second));
    }
    bytes += all_mapped ? mapped : token;
  }
  tokens.clear();
  tokens.push_back(utf8_lossy(bytes));
}

void ByteFallbackDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string pending;
  const auto flush = [&] {
    if (pending.empty()) return;
    if (find_invalid_utf8(pending) == std::string::npos) {
      out.push_back(pending);
    } else {
      for (std::size_t i = 0; i < pending.size(); ++i)
        out.emplace_back("\xEF\xBF\xBD");
    }
    pending.clear();
  };
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (auto& token : tokens) {
    if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>' &&
        hex(token[3]) >= 0 && hex(token[4]) >= 0) {
      pending.push_back(static_cast<char>(hex(token[3]) * 16 + hex(token[4])));
      continue;
    }
    flush();
    out.push_back(std::move(token));
  }
  flush();
  tokens = std::move(out);
}

void FuseDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::string joined;
  for (const auto& token : tokens)
    joined += token;
  tokens.clear();
  tokens.push_back(std::move(joined));
}

void ReplaceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (auto& token : tokens)
    replace_all(token, pattern_, content_);
}

void StripDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (auto& token : tokens) {
    std::size_t begin = 0, end = token.size();
    for (std::size_t n = 0;
         n < start_ && token.compare(begin, content_.size(), content_) == 0 && begin < end; ++n) {
      begin += content_.size();
    }
    for (std::size_t n = 0; n < stop_ && end >= begin + content_.size() &&
                            token.compare(end - content_.size(), content_.size(), content_) == 0;
         ++n) {
      end -= content_.size();
    }
    token = token.substr(begin, end - begin);
  }
}

void MetaspaceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    // The first token loses its replacement characters altogether (they stand for the space
    // the pre-tokenizer prepended); later ones turn them into spaces.
    const bool first = i == 0 && scheme_ != PrependScheme::kNever;
    replace_all(tokens[i], replacement_, first ? "" : " ");
  }
}

std::string cleanup_tokenization_spaces(std::string text) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
      {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
      {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules)
    replace_all(text, from, to);
  return text;
}

void WordPieceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    auto& token = tokens[i];
    if (i != 0) {
      if (token.compare(0, prefix_.size(), prefix_) == 0) {
        token.erase(0, prefix_.size());
      } else {
        token.insert(token.begin(), ' ');
      }
    }
    if (cleanup_) token = cleanup_tokenization_spaces(std::move(token));
  }
}

void BpeSuffixDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    replace_all(tokens[i], suffix_, i + 1 == tokens.size() ? "" : " ");
  }
}

}  // namespace weft::text
