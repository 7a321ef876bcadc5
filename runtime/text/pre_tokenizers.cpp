#include "runtime/text/pre_tokenizers.hpp"

#include <utf8proc.h>

#include "runtime/text/unicode.hpp"
#include "runtime/text/utf8.hpp"

namespace weft::text {
namespace {

// GPT-2's pattern, as tokenizers' ByteLevel pre-tokenizer uses it with use_regex.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::vector<MatchRange> ranges_from_matches(
    std::size_t size, const std::vector<std::pair<std::size_t, std::size_t>>& matches) {
  std::vector<MatchRange> ranges;
  ranges.reserve(matches.size() * 2 + 1);
  std::size_t prev = 0;
  for (const auto& [begin, end] : matches) {
    if (prev != begin) ranges.push_back({prev, begin, false});
    ranges.push_back({begin, end, true});
    prev = end;
  }
  if (prev != size) ranges.push_back({prev, size, false});
  return ranges;
}

template <class Fn>
void for_each_piece(std::vector<TextPiece>& pieces, Fn&& split_one) {
  std::vector<TextPiece> out;
  out.reserve(pieces.size() * 2);
  for (const auto& piece : pieces)
    split_one(piece, out);
  pieces = std::move(out);
}

}  // namespace

void split_by_behavior(const TextPiece& piece, std::vector<MatchRange> ranges,
                       SplitBehavior behavior, std::vector<TextPiece>& out) {
  std::vector<std::pair<std::size_t, std::size_t>> kept;
  kept.reserve(ranges.size());
  // These folds follow tokenizers' NormalizedString::split exactly, including how a run of
  // consecutive matches merges.
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const auto& r : ranges)
        kept.emplace_back(r.begin, r.end);
      break;
    case SplitBehavior::kRemoved:
      for (const auto& r : ranges) {
        if (!r.is_match) kept.emplace_back(r.begin, r.end);
      }
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const auto& r : ranges) {
        if (r.is_match && !previous_match && !kept.empty()) {
          kept.back().second = r.end;
        } else {
          kept.emplace_back(r.begin, r.end);
        }
        previous_match = r.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = ranges.rbegin(); it != ranges.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) {
          kept.back().first = it->begin;
        } else {
          kept.emplace_back(it->begin, it->end);
        }
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const auto& r : ranges) {
        if (r.is_match == previous_match && !kept.empty()) {
          kept.back().second = r.end;
        } else {
          kept.emplace_back(r.begin, r.end);
        }
        previous_match = r.is_match;
      }
      break;
    }
  }
  for (const auto& [begin, end] : kept) {
    if (begin == end) continue;
    out.push_back({piece.text.substr(begin, end - begin), piece.at_start && begin == 0});
  }
}

void SplitPreTokenizer::pre_tokenize(std::vector<TextPiece>& pieces) const {
  for_each_piece(pieces, [&](const TextPiece& piece, std::vector<TextPiece>& out) {
    std::vector<std::pair<std::size_t, std::size_t>> matches;
    if (regex_) {
      matches = regex_->find_all(piece.text);
    } else if (!literal_.empty()) {
      for (std::size_t pos = 0; (pos = piece.text.find(literal_, pos)) != std::string::npos;
           pos += literal_.size()) {
        matches.emplace_back(pos, pos + literal_.size());
      }
    }
    auto ranges = ranges_from_matches(piece.text.size(), matches);
    if (invert_) {
      for (auto& r : ranges)
        r.is_match = !r.is_match;
    }
    split_by_behavior(piece, std::move(ranges), behavior_, out);
  });
}

const std::array<std::string, 256>& byte_level_alphabet() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      append_utf8(t[b], static_cast<char32_t>(printable ? b : next++));
    }
    return t;
  }();
  return table;
}

ByteLevelPreTokenizer::ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
    : add_prefix_space_(add_prefix_space) {
  if (use_regex) regex_ = Regex::compile(kGpt2Pattern).value();
}

void ByteLevelPreTokenizer::pre_tokenize(std::vector<TextPiece>& pieces) const {
  const auto& alphabet = byte_level_alphabet();
  for_each_piece(pieces, [&](const TextPiece& input, std::vector<TextPiece>& out) {
    TextPiece piece = input;
    if (add_prefix_space_ && piece.text.rfind(' ', 0) != 0)
      piece.text.insert(piece.text.begin(), ' ');
    const std::size_t first = out.size();
    if (regex_) {
      split_by_behavior(piece, ranges_from_matches(piece.text.size(), regex_->find_all(piece.text)),
                        SplitBehavior::kIsolated, out);
    } else if (!piece.text.empty()) {
      out.push_back(std::move(piece));
    }
    for (std::size_t i = first; i < out.size(); ++i) {
      std::string mapped;
      mapped.reserve(out[i].text.size() * 2);
      for (unsigned char b : out[i].text)
        mapped += alphabet[b];
      out[i].text = std::move(mapped);
    }
  });
}

void MetaspacePreTokenizer::pre_tokenize(std::vector<TextPiece>& pieces) const {
  for_each_piece(pieces, [&](const TextPiece& input, std::vector<TextPiece>& out) {
    TextPiece piece;
    piece.at_start = input.at_start;
    piece.text.reserve(input.text.size() + 8);
    for (char c : input.text) {
      if (c == ' ') {
        piece.text += replacement_;
      } else {
        piece.text.push_back(c);
      }
    }
    const bool starts_with = piece.text.rfind(replacement_, 0) == 0;
    if (!starts_with && (scheme_ == PrependScheme::kAlways ||
                         (scheme_ == PrependScheme::kFirst && piece.at_start))) {
      piece.text.insert(0, replacement_);
    }
    if (!split_) {
      if (!piece.text.empty()) out.push_back(std::move(piece));
      return;
    }
    std::vector<std::pair<std::size_t, std::size_t>> matches;
    for (std::size_t pos = 0; (pos = piece.text.find(replacement_, pos)) != std::string::npos;
         pos += replacement_.size()) {
      matches.emplace_back(pos, pos + replacement_.size());
    }
    split_by_behavior(piece, ranges_from_matches(piece.text.size(), matches),
                      SplitBehavior::kMergedWithNext, out);
  });
}

void CharClassPreTokenizer::pre_tokenize(std::vector<TextPiece>& pieces) const {
  for_each_piece(pieces, [&](const TextPiece& piece, std::vector<TextPiece>& out) {
    std::vector<MatchRange> ranges;
    std::size_t run_begin = 0;
    for (std::size_t pos = 0; pos < piece.text.size();) {
      const std::size_t begin = pos;
      if (is_delimiter_(next_code_point(piece.text, pos))) {
        if (run_begin != begin) ranges.push_back({run_begin, begin, false});
        ranges.push_back({begin, pos, true});
        run_begin = pos;
      }
    }
    if (run_begin != piece.text.size()) ranges.push_back({run_begin, piece.text.size(), false});
    split_by_behavior(piece, std::move(ranges), behavior_, out);
  });
}

void WhitespacePreTokenizer::pre_tokenize(std::vector<TextPiece>& pieces) const {
  for_each_piece(pieces, [&](const TextPiece& piece, std::vector<TextPiece>& out) {
    // 0: whitespace, 1: word, 2: other; runs of 1 or of 2 are the pieces.
    std::size_t run_begin = 0;
    int run_kind = -1;
    const auto flush = [&](std::size_t end) {
      if (run_kind > 0 && end > run_begin) {
        out.push_back(
            {piece.text.substr(run_begin, end - run_begin), piece.at_start && run_begin == 0});
      }
    };
    for (std::size_t pos = 0; pos < piece.text.size();) {
      const std::size_t begin = pos;
      const char32_t c = next_code_point(piece.text, pos);
      const int kind = is_word_char(c) ? 1 : is_whitespace(c) ? 0 : 2;
      if (kind != run_kind) {
        flush(begin);
        run_begin = begin;
        run_kind = kind;
      }
    }
    flush(piece.text.size());
  });
}

bool is_bert_punctuation(char32_t c) {
  if (c < 0x80) {
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
           (c >= 123 && c <= 126);
  }
  return is_punctuation(c);
}

bool is_numeric(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

}  // namespace weft::text
