#include "runtime/text/jinja_lexer.hpp"

#include <algorithm>
#include <cstdlib>

#include "runtime/text/jinja_strings.hpp"

namespace weft::jinja {
namespace {

// Length of the UTF-8 whitespace code point at `pos`, or 0.
std::size_t space_at(std::string_view s, std::size_t pos) {
  if (pos >= s.size()) return 0;
  auto c = static_cast<unsigned char>(s[pos]);
  if (c < 0x80) return is_python_space(c) ? 1 : 0;
  std::size_t len = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : 4;
  if (pos + len > s.size()) return 0;
  std::vector<char32_t> cp = decode_utf8(s.substr(pos, len));
  return cp.size() == 1 && is_python_space(cp[0]) ? len : 0;
}

std::size_t skip_space(std::string_view s, std::size_t pos) {
  while (std::size_t n = space_at(s, pos))
    pos += n;
  return pos;
}

bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

class Lexer {
 public:
  Lexer(std::string_view source, std::string_view name, const LexOptions& options)
      : name_(name), options_(options) {
    // Jinja splits on \r\n, \r and \n, joins with \n, and drops one trailing newline
    // (keep_trailing_newline is off).
    for (std::size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (std::size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  Result<std::vector<Token>> run() {
    std::size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      std::size_t tag = find_tag(pos);
      if (tag == std::string::npos) {
        push_text(src_.substr(pos), pos);
        break;
      }
      char kind = src_[tag + 1];  // '{', '%' or '#'
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      std::string text = src_.substr(pos, tag - pos);
      if (sign == '-') {
        text = py_strip(text, std::nullopt, StripSide::kRight);
      } else if (sign != '+' && kind != '{' && options_.lstrip_blocks) {
        std::size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0 || line_starting) {
          if (skip_space(text, l_pos) == text.size()) text.resize(l_pos);
        }
      }
      push_text(text, pos);
      std::size_t after = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      std::size_t end;
      if (kind == '#') {
        std::size_t close = src_.find("#}", after);
        if (close == std::string::npos) return error(tag, "the comment is never closed with '#}'");
        end = finish_tag(close, close > after && src_[close - 1] == '-', close + 2, true);
      } else if (kind == '%' && is_raw(after)) {
        auto r = lex_raw(tag, after);
        if (!r) return r.error();
        end = r.value();
      } else {
        auto r = lex_tag(tag, after, kind == '%');
        if (!r) return r.error();
        end = r.value();
      }
      line_starting = end > 0 && src_[end - 1] == '\n';
      pos = end;
    }
    tokens_.push_back(make(TokenKind::kEnd, "", src_.size()));
    return std::move(tokens_);
  }

 private:
  std::size_t find_tag(std::size_t pos) const {
    while (true) {
      std::size_t open = src_.find('{', pos);
      if (open == std::string::npos || open + 1 >= src_.size()) return std::string::npos;
      char next = src_[open + 1];
      if (next == '{' || next == '%' || next == '#') return open;
      pos = open + 1;
    }
  }

  // After a tag's closing marker at `close_end`: `-` strips all following whitespace,
  // trim_blocks removes one newline after block and comment tags unless marked with `+`.
  std::size_t finish_tag(std::size_t close, bool minus, std::size_t close_end, bool block) {
    if (minus) return skip_space(src_, close_end);
    bool plus = close > 0 && src_[close - 1] == '+';
    if (block && !plus && options_.trim_blocks && close_end < src_.size() &&
        src_[close_end] == '\n') {
      return close_end + 1;
    }
    return close_end;
  }

  bool is_raw(std::size_t after) const {
    std::size_t p = skip_space(src_, after);
    if (src_.compare(p, 3, "raw") != 0) return false;
    p = skip_space(src_, p + 3);
    return src_.compare(p, 2, "%}") == 0 || src_.compare(p, 3, "-%}") == 0;
  }

  Result<std::size_t> lex_raw(std::size_t tag, std::size_t after) {
    std::size_t p = skip_space(src_, skip_space(src_, after) + 3);
    bool minus = src_[p] == '-';
    std::size_t body = finish_tag(p + (minus ? 1 : 0), minus, p + (minus ? 3 : 2), true);
    std::size_t search = body;
    while (true) {
      std::size_t open = src_.find("{%", search);
      if (open == std::string::npos) return error(tag, "'raw' is never closed with 'endraw'");
      char sign = open + 2 < src_.size() ? src_[open + 2] : '\0';
      std::size_t q = skip_space(src_, open + 2 + ((sign == '-' || sign == '+') ? 1 : 0));
      if (src_.compare(q, 6, "endraw") == 0) {
        q = skip_space(src_, q + 6);
        bool end_minus = src_.compare(q, 3, "-%}") == 0;
        if (end_minus || src_.compare(q, 2, "%}") == 0) {
          std::string text = src_.substr(body, open - body);
          if (sign == '-') text = py_strip(text, std::nullopt, StripSide::kRight);
          push_text(text, body);
          std::size_t close = q + (end_minus ? 1 : 0);
          return finish_tag(close, end_minus, close + 2, true);
        }
      }
      search = open + 2;
    }
  }

  Result<std::size_t> lex_tag(std::size_t tag, std::size_t p, bool block) {
    tokens_.push_back(make(block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, "", tag));
    const char close = block ? '%' : '}';
    std::vector<char> balance;
    while (true) {
      p = skip_space(src_, p);
      if (p >= src_.size()) {
        return error(tag, std::string("the tag is never closed with '") + close + "}'");
      }
      if (balance.empty()) {
        bool minus = src_.compare(p, 3, std::string("-") + close + "}") == 0;
        bool plus = block && src_.compare(p, 3, "+%}") == 0;
        if (minus || plus || src_.compare(p, 2, std::string(1, close) + "}") == 0) {
          std::size_t marker = p + ((minus || plus) ? 1 : 0);
          tokens_.push_back(make(block ? TokenKind::kBlockEnd : TokenKind::kVarEnd, "", p));
          return finish_tag(marker, minus, marker + 2, block);
        }
      }
      char c = src_[p];
      if (is_name_start(c)) {
        std::size_t q = p;
        while (q < src_.size() && (is_name_start(src_[q]) || is_digit(src_[q])))
          ++q;
        tokens_.push_back(make(TokenKind::kName, src_.substr(p, q - p), p));
        p = q;
      } else if (is_digit(c)) {
        auto r = lex_number(p);
        if (!r) return r.error();
        p = r.value();
      } else if (c == '\'' || c == '"') {
        auto r = lex_string(p);
        if (!r) return r.error();
        p = r.value();
      } else {
        static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                     "/",  "%",  "~",  "<",  ">",  "=",  ".", ",", ":",
                                     "|",  "(",  ")",  "[",  "]",  "{",  "}"};
        std::string op;
        for (const char* o : kOps) {
          if (src_.compare(p, std::char_traits<char>::length(o), o) == 0) {
            op = o;
            break;
          }
        }
        if (op.empty()) return error(p, std::string("unexpected character '") + c + "'");
        if (op == "(" || op == "[" || op == "{")
          balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        if (op == ")" || op == "]" || op == "}") {
          if (balance.empty() || balance.back() != op[0]) {
            return error(p, "unexpected '" + op + "'");
          }
          balance.pop_back();
        }
        tokens_.push_back(make(TokenKind::kOperator, op, p));
        p += op.size();
      }
    }
  }

  Result<std::size_t> lex_number(std::size_t p) {
    std::size_t q = p;
    auto digits = [&] {
      while (q < src_.size() && (is_digit(src_[q]) || (src_[q] == '_' && q + 1 < src_.size() &&
                                                       is_digit(src_[q + 1])))) {
        ++q;
      }
    };
    digits();
    bool is_float = false;
    if (q + 1 < src_.size() && src_[q] == '.' && is_digit(src_[q + 1])) {
      is_float = true;
      ++q;
      digits();
    }
    if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      std::size_t e = q + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && is_digit(src_[e])) {
        is_float = true;
        q = e;
        digits();
      }
    }
    std::string text;
    for (std::size_t i = p; i < q; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    Token t = make(is_float ? TokenKind::kFloat : TokenKind::kInteger, text, p);
    if (is_float) {
      t.number = Value(std::strtod(text.c_str(), nullptr));
    } else {
      errno = 0;
      long long v = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) return error(p, "the integer " + text + " does not fit in 64 bits");
      t.number = Value(static_cast<std::int64_t>(v));
    }
    tokens_.push_back(std::move(t));
    return q;
  }

  // A string literal, unescaped as Python's "unicode-escape" codec does.
  Result<std::size_t> lex_string(std::size_t p) {
    char quote = src_[p];
    std::string value;
    std::size_t q = p + 1;
    while (true) {
      if (q >= src_.size()) return error(p, "the string literal is never closed");
      char c = src_[q];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++q;
        continue;
      }
      if (q + 1 >= src_.size()) return error(p, "the string literal is never closed");
      char e = src_[q + 1];
      q += 2;
      switch (e) {
        case '\n':
          break;
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case 'a':
          value += '\a';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'n':
          value += '\n';
          break;
        case 'r':
          value += '\r';
          break;
        case 't':
          value += '\t';
          break;
        case 'v':
          value += '\v';
          break;
        case 'x':
        case 'u':
        case 'U': {
          std::size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (q + n > src_.size())
            return error(q - 2, "truncated \\" + std::string(1, e) + " escape");
          std::string hex = src_.substr(q, n);
          if (!std::all_of(hex.begin(), hex.end(),
                           [](char h) { return std::isxdigit(static_cast<unsigned char>(h)); })) {
            return error(q - 2, "truncated \\" + std::string(1, e) + " escape");
          }
          auto cp = static_cast<char32_t>(std::strtoul(hex.c_str(), nullptr, 16));
          if (cp > 0x10ffff)
            return error(q - 2, "the escape \\" + std::string(1, e) + hex + " is not a code point");
          append_utf8(cp, value);
          q += n;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            auto cp = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && q < src_.size() && src_[q] >= '0' && src_[q] <= '7'; ++k) {
              cp = cp * 8 + static_cast<char32_t>(src_[q++] - '0');
            }
            append_utf8(cp, value);
          } else if (e == 'N') {
            return error(q - 2, "\\N{...} escapes are not supported");
          } else {
            value += '\\';  // Python keeps unknown escapes as written
            value += e;
          }
      }
    }
    tokens_.push_back(make(TokenKind::kString, std::move(value), p));
    return q + 1;
  }

  void push_text(std::string text, std::size_t offset) {
    if (!text.empty()) tokens_.push_back(make(TokenKind::kText, std::move(text), offset));
  }

  Token make(TokenKind kind, std::string text, std::size_t offset) const {
    Token t{kind, std::move(text), Value(), 1, 1};
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    std::size_t line_index = static_cast<std::size_t>(it - line_starts_.begin()) - 1;
    t.line = static_cast<int>(line_index + 1);
    // Tokens come in order, so the code points before this one are counted from the previous
    // token of the line rather than from the line's start (a long line of many tokens was
    // counted over and over: quadratic). The previous offset is reused only where it holds an
    // ASCII byte, which no UTF-8 sequence, well-formed or not, reaches across.
    std::size_t from = line_starts_[line_index];
    std::size_t before = 0;
    if (counted_line_ == line_index && counted_offset_ >= from && counted_offset_ <= offset) {
      from = counted_offset_;
      before = counted_points_;
    }
    const std::size_t points =
        before + count_code_points(std::string_view(src_).substr(from, offset - from));
    if (offset < src_.size() && static_cast<unsigned char>(src_[offset]) < 0x80) {
      counted_line_ = line_index;
      counted_offset_ = offset;
      counted_points_ = points;
    }
    t.column = static_cast<int>(points + 1);
    return t;
  }

  Error error(std::size_t offset, const std::string& what) const {
    Token t = make(TokenKind::kEnd, "", offset);
    return Error(ErrorCode::kParse, std::string(name_) + ":" + std::to_string(t.line) + ":" +
                                        std::to_string(t.column) + ": " + what);
  }

  std::string src_;
  std::string_view name_;
  LexOptions options_;
  std::vector<std::size_t> line_starts_;
  // The last position make() counted: its line, its offset and the code points before it.
  mutable std::size_t counted_line_ = static_cast<std::size_t>(-1);
  mutable std::size_t counted_offset_ = 0;
  mutable std::size_t counted_points_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

Result<std::vector<Token>> tokenize(std::string_view source, std::string_view source_name,
                                    const LexOptions& options) {
  return Lexer(source, source_name, options).run();
}

}  // namespace weft::jinja
