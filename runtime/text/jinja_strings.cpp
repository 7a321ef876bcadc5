#include "runtime/text/jinja_strings.hpp"

namespace weft::jinja {

std::vector<char32_t> decode_utf8(std::string_view text) {
  std::vector<char32_t> out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    auto b0 = static_cast<unsigned char>(text[i]);
    int len = b0 < 0x80           ? 1
              : (b0 >> 5) == 0x6  ? 2
              : (b0 >> 4) == 0xe  ? 3
              : (b0 >> 3) == 0x1e ? 4
                                  : 0;
    bool ok = len > 0 && i + len <= text.size();
    char32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1f) : len == 3 ? (b0 & 0x0f) : (b0 & 0x07);
    for (int k = 1; ok && k < len; ++k) {
      auto b = static_cast<unsigned char>(text[i + k]);
      if ((b & 0xc0) != 0x80) ok = false;
      cp = (cp << 6) | (b & 0x3f);
    }
    if (!ok) {
      out.push_back(b0);
      ++i;
    } else {
      out.push_back(cp);
      i += static_cast<std::size_t>(len);
    }
  }
  return out;
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

std::size_t count_code_points(std::string_view text) {
  bool ascii = true;
  for (char c : text)
    ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  // Counted as decode_utf8 splits, so that lengths agree with indices on malformed text.
  return ascii ? text.size() : decode_utf8(text).size();
}

bool is_python_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

namespace {

std::string encode(const std::vector<char32_t>& cps, std::size_t begin, std::size_t end) {
  std::string out;
  for (std::size_t i = begin; i < end; ++i)
    append_utf8(cps[i], out);
  return out;
}

}  // namespace

std::string py_strip(std::string_view text, const std::optional<std::string>& chars,
                     StripSide side) {
  std::vector<char32_t> cps = decode_utf8(text);
  std::vector<char32_t> set;
  if (chars) set = decode_utf8(*chars);
  auto strip_it = [&](char32_t cp) {
    if (!chars) return is_python_space(cp);
    for (char32_t c : set) {
      if (c == cp) return true;
    }
    return false;
  };
  std::size_t begin = 0, end = cps.size();
  if (side != StripSide::kRight) {
    while (begin < end && strip_it(cps[begin]))
      ++begin;
  }
  if (side != StripSide::kLeft) {
    while (end > begin && strip_it(cps[end - 1]))
      --end;
  }
  return encode(cps, begin, end);
}

std::vector<std::string> py_split(std::string_view text, const std::optional<std::string>& sep,
                                  std::int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    std::size_t pos = 0;
    while (maxsplit < 0 || static_cast<std::int64_t>(out.size()) < maxsplit) {
      std::size_t hit = text.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      out.emplace_back(text.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.emplace_back(text.substr(pos));
    return out;
  }
  std::vector<char32_t> cps = decode_utf8(text);
  std::size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && is_python_space(cps[i]))
      ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit) {
      // The rest, with its trailing whitespace stripped, is the last part.
      std::size_t end = cps.size();
      while (end > i && is_python_space(cps[end - 1]))
        --end;
      out.push_back(encode(cps, i, end));
      break;
    }
    std::size_t start = i;
    while (i < cps.size() && !is_python_space(cps[i]))
      ++i;
    out.push_back(encode(cps, start, i));
  }
  return out;
}

std::string py_replace(std::string_view text, std::string_view old_text, std::string_view new_text,
                       std::int64_t count) {
  std::string out;
  if (old_text.empty()) {
    // Python inserts `new_text` before every code point and at the end.
    std::vector<char32_t> cps = decode_utf8(text);
    std::int64_t done = 0;
    for (char32_t cp : cps) {
      if (count < 0 || done < count) {
        out += new_text;
        ++done;
      }
      append_utf8(cp, out);
    }
    if (count < 0 || done < count) out += new_text;
    return out;
  }
  std::size_t pos = 0;
  std::int64_t done = 0;
  while (count < 0 || done < count) {
    std::size_t hit = text.find(old_text, pos);
    if (hit == std::string_view::npos) break;
    out += text.substr(pos, hit - pos);
    out += new_text;
    pos = hit + old_text.size();
    ++done;
  }
  out += text.substr(pos);
  return out;
}

std::string py_upper(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return out;
}

std::string py_lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string py_title(std::string_view text) {
  std::string out(text);
  bool previous_cased = false;
  for (char& c : out) {
    bool upper = c >= 'A' && c <= 'Z';
    bool lower = c >= 'a' && c <= 'z';
    if (upper && previous_cased) c = static_cast<char>(c - 'A' + 'a');
    if (lower && !previous_cased) c = static_cast<char>(c - 'a' + 'A');
    previous_cased = upper || lower;
  }
  return out;
}

std::string py_capitalize(std::string_view text) {
  std::string out = py_lower(text);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z')
    out[0] = static_cast<char>(out[0] - 'a' + 'A');
  return out;
}

std::string jinja_title(std::string_view text) {
  std::string out;
  bool word_start = true;
  for (char32_t cp : decode_utf8(text)) {
    bool separator =
        cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || is_python_space(cp);
    if (separator) {
      word_start = true;
    } else if (word_start) {
      if (cp >= 'a' && cp <= 'z') cp -= 'a' - 'A';
      word_start = false;
    } else if (cp >= 'A' && cp <= 'Z') {
      cp += 'a' - 'A';
    }
    append_utf8(cp, out);
  }
  return out;
}

}  // namespace weft::jinja
