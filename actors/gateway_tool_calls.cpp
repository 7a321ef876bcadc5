#include "actors/gateway_tool_calls.hpp"

namespace weft::gateway {

namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// The length of the longest suffix of `text` that is a proper prefix of `word`.
std::size_t partial_suffix(std::string_view text, std::string_view word) {
  for (std::size_t n = std::min(text.size(), word.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == word.substr(0, n)) return n;
  }
  return 0;
}

// A cursor over held text that knows when it ran out (more may come) and when the text
// cannot be what was expected.
struct Cursor {
  std::string_view s;
  std::size_t i = 0;
  void skip_space() {
    while (i < s.size() && space(s[i]))
      ++i;
  }
  bool at_end() const { return i >= s.size(); }
  // kDone when `word` is next (consumed), kMore when the text ends inside it.
  int expect(std::string_view word) {
    const std::size_t n = std::min(word.size(), s.size() - i);
    if (s.substr(i, n) != word.substr(0, n)) return -1;
    if (n < word.size()) return 0;
    i += n;
    return 1;
  }
};

}  // namespace

ToolCallParser::ToolCallParser(grammar::ToolCallFormat format, std::function<std::string()> new_id)
    : format_(format), new_id_(std::move(new_id)) {
  if (format_ == grammar::ToolCallFormat::kHermes) state_ = State::kText;
}

void ToolCallParser::content(std::vector<ToolCallPiece>& out, std::string text,
                             bool keep_trailing_space) {
  text = held_space_ + text;
  held_space_.clear();
  if (keep_trailing_space) {
    std::size_t end = text.size();
    while (end > 0 && space(text[end - 1]))
      --end;
    held_space_ = text.substr(end);
    text.resize(end);
  }
  if (text.empty()) return;
  if (!out.empty() && out.back().kind == ToolCallPiece::Kind::kContent) {
    out.back().text += text;
  } else {
    out.push_back({ToolCallPiece::Kind::kContent, 0, std::move(text), {}, {}});
  }
}

std::vector<ToolCallPiece> ToolCallParser::feed(std::string_view text) {
  pending_ += text;
  std::vector<ToolCallPiece> out;
  run(out, false);
  return out;
}

std::vector<ToolCallPiece> ToolCallParser::finish() {
  std::vector<ToolCallPiece> out;
  run(out, true);
  if (state_ == State::kText || state_ == State::kStart) {
    content(out, std::move(pending_), false);
  } else if (state_ == State::kHeader && calls_ == 0) {
    // Cut off before the first call's name: what there is stays text.
    content(out, call_raw_ + pending_, false);
  }
  pending_.clear();
  held_space_.clear();
  state_ = State::kDone;
  return out;
}

ToolCallParser::Match ToolCallParser::header(std::size_t& used, std::string& name) const {
  Cursor c{pending_};
  auto step = [&](std::string_view word) {
    c.skip_space();
    return c.expect(word);
  };
  for (std::string_view word : {"{", "\"name\"", ":", "\""}) {
    const int r = step(word);
    if (r < 0) return Match::kFail;
    if (r == 0 || c.at_end()) return Match::kMore;
  }
  name.clear();
  for (;;) {
    if (c.at_end()) return Match::kMore;
    const char ch = c.s[c.i++];
    if (ch == '"') break;
    if (ch == '\\') {
      if (c.at_end()) return Match::kMore;
      name += c.s[c.i++];
    } else {
      name += ch;
    }
  }
  int r = step(",");
  if (r <= 0) return r < 0 ? Match::kFail : Match::kMore;
  c.skip_space();
  const std::string_view key =
      format_ == grammar::ToolCallFormat::kHermes ? "\"arguments\"" : "\"parameters\"";
  r = c.expect(key);
  if (r <= 0) return r < 0 ? Match::kFail : Match::kMore;
  r = step(":");
  if (r <= 0) return r < 0 ? Match::kFail : Match::kMore;
  used = c.i;
  return Match::kDone;
}

ToolCallParser::Match ToolCallParser::after_args(std::size_t& used) const {
  Cursor c{pending_};
  c.skip_space();
  int r = c.expect("}");
  if (r <= 0) return r < 0 ? Match::kFail : Match::kMore;
  if (format_ == grammar::ToolCallFormat::kHermes) {
    c.skip_space();
    r = c.expect(kClose);
    if (r <= 0) return r < 0 ? Match::kFail : Match::kMore;
  }
  used = c.i;
  return Match::kDone;
}

void ToolCallParser::run(std::vector<ToolCallPiece>& out, bool at_end) {
  for (;;) {
    switch (state_) {
      case State::kStart: {
        // llama3_json: a call is an output that starts with '{' (or the python tag).
        std::size_t i = 0;
        while (i < pending_.size() && space(pending_[i]))
          ++i;
        if (i == pending_.size()) return;
        const std::string_view rest = std::string_view(pending_).substr(i);
        if (rest.starts_with(kPythonTag)) {
          call_raw_ = pending_.substr(0, i + kPythonTag.size());
          pending_.erase(0, i + kPythonTag.size());
          state_ = State::kHeader;
        } else if (rest[0] == '{') {
          call_raw_ = pending_.substr(0, i);
          pending_.erase(0, i);
          state_ = State::kHeader;
        } else if (kPythonTag.starts_with(rest) && !at_end) {
          return;
        } else {
          state_ = State::kText;
        }
        break;
      }
      case State::kText: {
        if (format_ == grammar::ToolCallFormat::kLlama3Json) {
          content(out, std::move(pending_), false);
          pending_.clear();
          return;
        }
        const std::size_t at = pending_.find(kOpen);
        if (at == std::string::npos) {
          const std::size_t keep = at_end ? 0 : partial_suffix(pending_, kOpen);
          content(out, pending_.substr(0, pending_.size() - keep), !at_end);
          pending_.erase(0, pending_.size() - keep);
          return;
        }
        content(out, pending_.substr(0, at), true);
        held_space_.clear();  // whitespace between the text and a call is no content
        call_raw_ = std::string(kOpen);
        pending_.erase(0, at + kOpen.size());
        state_ = State::kHeader;
        break;
      }
      case State::kHeader: {
        std::size_t used = 0;
        std::string name;
        const Match m = header(used, name);
        if (m == Match::kMore) return;
        if (m == Match::kFail) {
          if (calls_ > 0) {
            state_ = State::kDone;
            break;
          }
          // Not a call after all: the text so far is content.
          pending_ = call_raw_ + pending_;
          call_raw_.clear();
          state_ = State::kText;
          if (format_ == grammar::ToolCallFormat::kHermes) {
            // Pass the marker on as text, then go on looking for the next one.
            const std::size_t at = pending_.find(kOpen);
            content(out, pending_.substr(0, at + kOpen.size()), false);
            pending_.erase(0, at + kOpen.size());
          }
          break;
        }
        out.push_back({ToolCallPiece::Kind::kCallStart, calls_, {}, new_id_(), std::move(name)});
        ++calls_;
        pending_.erase(0, used);
        call_raw_.clear();
        depth_ = 0;
        in_string_ = escaped_ = args_started_ = false;
        state_ = State::kArgs;
        break;
      }
      case State::kArgs: {
        std::size_t i = 0;
        if (!args_started_) {
          while (i < pending_.size() && space(pending_[i]))
            ++i;
        }
        const std::size_t from = i;
        bool done = false;
        for (; i < pending_.size() && !done; ++i) {
          const char ch = pending_[i];
          args_started_ = true;
          if (in_string_) {
            if (escaped_) {
              escaped_ = false;
            } else if (ch == '\\') {
              escaped_ = true;
            } else if (ch == '"') {
              in_string_ = false;
            }
            continue;
          }
          if (ch == '"') {
            in_string_ = true;
          } else if (ch == '{' || ch == '[') {
            ++depth_;
          } else if (ch == '}' || ch == ']') {
            if (--depth_ <= 0) done = true;
          }
        }
        if (i > from) {
          out.push_back({ToolCallPiece::Kind::kArguments,
                         calls_ - 1,
                         pending_.substr(from, i - from),
                         {},
                         {}});
        }
        pending_.erase(0, i);
        if (!done) return;
        state_ = State::kAfterArgs;
        break;
      }
      case State::kAfterArgs: {
        std::size_t used = 0;
        const Match m = after_args(used);
        if (m == Match::kMore) return;
        if (m == Match::kFail) {
          state_ = State::kDone;
          break;
        }
        pending_.erase(0, used);
        state_ = State::kBetween;
        break;
      }
      case State::kBetween: {
        Cursor c{pending_};
        c.skip_space();
        if (c.at_end()) return;
        const int r = c.expect(format_ == grammar::ToolCallFormat::kHermes ? kOpen : ";");
        if (r == 0) return;
        if (r < 0) {
          state_ = State::kDone;
          break;
        }
        pending_.erase(0, c.i);
        state_ = State::kHeader;
        break;
      }
      case State::kDone:
        // Whatever follows the last call is not part of the answer.
        pending_.clear();
        return;
    }
  }
}

void collect(const std::vector<ToolCallPiece>& pieces, ParsedToolCalls& into) {
  for (const ToolCallPiece& p : pieces) {
    switch (p.kind) {
      case ToolCallPiece::Kind::kContent:
        into.content += p.text;
        break;
      case ToolCallPiece::Kind::kCallStart:
        into.calls.push_back({p.id, p.name, {}});
        break;
      case ToolCallPiece::Kind::kArguments:
        if (p.index < static_cast<int>(into.calls.size())) into.calls[p.index].arguments += p.text;
        break;
    }
  }
}

}  // namespace weft::gateway
