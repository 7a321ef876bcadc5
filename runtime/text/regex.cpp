#define PCRE2_CODE_UNIT_WIDTH 8
#include "runtime/text/regex.hpp"

#include <pcre2.h>

#include "runtime/text/utf8.hpp"

namespace weft::text {

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

Result<Regex> Regex::compile(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    return Error(ErrorCode::kParse, "regular expression /" + std::string(pattern) +
                                        "/ does not compile at offset " + std::to_string(offset) +
                                        ": " + reinterpret_cast<const char*>(message));
  }
  auto holder = std::make_shared<Code>();
  holder->code = code;
  // JIT is an optimisation: when the platform lacks it, the interpreter gives the same matches.
  holder->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  Regex regex;
  regex.code_ = std::move(holder);
  regex.pattern_ = std::string(pattern);
  return regex;
}

std::optional<std::pair<std::size_t, std::size_t>> Regex::match_from(std::string_view text,
                                                                     std::size_t start) const {
  // One match block per thread: matching allocates nothing in the steady state.
  thread_local std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create(1, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const int rc =
      code_->jit ? pcre2_jit_match(code_->code, subject, text.size(), start, 0, data.get(), nullptr)
                 : pcre2_match(code_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK,
                               data.get(), nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return std::nullopt;
  if (rc < 0) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(rc, message, sizeof message);
    throw Error(ErrorCode::kResourceExhausted,
                "regular expression /" + pattern_ + "/ failed on a text of " +
                    std::to_string(text.size()) +
                    " bytes: " + reinterpret_cast<const char*>(message));
  }
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
  return std::make_pair(static_cast<std::size_t>(ovector[0]), static_cast<std::size_t>(ovector[1]));
}

bool Regex::search(std::string_view text) const {
  return match_from(text, 0).has_value();
}

std::vector<std::pair<std::size_t, std::size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto match = match_from(text, start);
    if (!match) break;
    const auto [begin, end] = *match;
    matches.emplace_back(begin, end);
    if (end > begin) {
      start = end;
    } else {
      if (end >= text.size()) break;
      start = end + utf8_length(static_cast<unsigned char>(text[end]));
    }
  }
  return matches;
}

}  // namespace weft::text
