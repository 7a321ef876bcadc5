#pragma once
// Reading a speculation trace (WEFT_SPEC_TRACE, runtime/scheduler/speculation_trace.hpp) in the
// speculative engine tests: when a speculative run's greedy output leaves the plain one, say
// where — the first differing output token, the step and verification (or catch-up) that
// appended it, its tree and accepted path, and the sequence's events just before — so that a
// single run on the GPU pinpoints the cause.

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace weft::test_support {

struct TraceLine {
  std::uint64_t step = 0, sequence = 0;
  int prompt_len = 0, first_position = 0, catch_up = 0, computed = 0;
  std::string kind;
  std::vector<std::int64_t> tokens, parent, accepted, appended;
};

namespace trace_detail {

inline std::int64_t number(const std::string& line, const std::string& key) {
  const auto at = line.find("\"" + key + "\":");
  if (at == std::string::npos) return -1;
  return std::stoll(line.substr(at + key.size() + 3));
}

inline std::vector<std::int64_t> array(const std::string& line, const std::string& key) {
  std::vector<std::int64_t> out;
  auto at = line.find("\"" + key + "\":[");
  if (at == std::string::npos) return out;
  at += key.size() + 4;
  const auto end = line.find(']', at);
  std::stringstream items(line.substr(at, end - at));
  std::string item;
  while (std::getline(items, item, ','))
    if (!item.empty()) out.push_back(std::stoll(item));
  return out;
}

template <typename T>
std::string list(const std::vector<T>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i)
    s += (i > 0 ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

inline std::string describe(const TraceLine& e) {
  std::string s = "step " + std::to_string(e.step) + " sequence " + std::to_string(e.sequence) +
                  ": " + e.kind + " at position " + std::to_string(e.first_position) + " tokens " +
                  list(e.tokens);
  if (e.kind == "verify") {
    if (e.catch_up > 0) {
      s += " (a catch-up of " + std::to_string(e.catch_up) + ", then the root at " +
           std::to_string(e.first_position + e.catch_up) + ")";
    }
    s += " parents " + list(e.parent) + " accepted path " + list(e.accepted);
  }
  return s + " appended " + list(e.appended) + " computed " + std::to_string(e.computed);
}

}  // namespace trace_detail

inline std::vector<TraceLine> read_speculation_trace(const std::string& path) {
  std::vector<TraceLine> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    TraceLine e;
    e.step = static_cast<std::uint64_t>(trace_detail::number(line, "step"));
    e.sequence = static_cast<std::uint64_t>(trace_detail::number(line, "sequence"));
    e.prompt_len = static_cast<int>(trace_detail::number(line, "prompt_len"));
    e.first_position = static_cast<int>(trace_detail::number(line, "first_position"));
    e.catch_up = std::max(0, static_cast<int>(trace_detail::number(line, "catch_up")));
    e.computed = static_cast<int>(trace_detail::number(line, "computed"));
    e.kind = line.find("\"kind\":\"verify\"") != std::string::npos ? "verify" : "decode_rows";
    e.tokens = trace_detail::array(line, "tokens");
    e.parent = trace_detail::array(line, "parent");
    e.accepted = trace_detail::array(line, "accepted");
    e.appended = trace_detail::array(line, "appended");
    out.push_back(std::move(e));
  }
  return out;
}

// The first output token where `speculative` leaves `plain` (a request of `prompt_tokens`
// prompt tokens, its `index` among the test's requests), and the trace's events of the
// sequence with that prompt length up to the one that appended it (the last `context` of
// them). Empty when the outputs agree.
inline std::string explain_first_difference(const std::vector<TraceLine>& trace, std::size_t index,
                                            int prompt_tokens,
                                            const std::vector<std::int32_t>& plain,
                                            const std::vector<std::int32_t>& speculative,
                                            std::size_t context = 3) {
  std::size_t k = 0;
  while (k < plain.size() && k < speculative.size() && plain[k] == speculative[k])
    ++k;
  if (k == plain.size() && k == speculative.size()) return {};
  std::ostringstream out;
  out << "request " << index << " (" << prompt_tokens << " prompt tokens): output token " << k
      << " (position " << prompt_tokens + static_cast<int>(k) << ") is "
      << (k < speculative.size() ? std::to_string(speculative[k]) : "missing") << " speculatively, "
      << (k < plain.size() ? std::to_string(plain[k]) : "missing") << " plainly.";
  const int position = prompt_tokens + static_cast<int>(k);
  std::vector<const TraceLine*> events;
  for (const auto& e : trace)
    if (e.prompt_len == prompt_tokens) events.push_back(&e);
  if (events.empty()) {
    out << " No trace for a sequence of that prompt length (WEFT_SPEC_TRACE unset?): the token "
           "came from plain decode steps.";
    return out.str();
  }
  // The event that appended position `position`: a verification rooted at r appends positions
  // r + 1, ..., r + appended; a chunk at f of n tokens appends position f + n.
  std::size_t culprit = events.size();
  for (std::size_t i = 0; i < events.size(); ++i) {
    const TraceLine& e = *events[i];
    const int first = e.kind == "verify" ? e.first_position + e.catch_up + 1
                                         : e.first_position + static_cast<int>(e.tokens.size());
    if (position >= first && position < first + static_cast<int>(e.appended.size())) {
      culprit = i;
      break;
    }
  }
  if (culprit == events.size()) {
    out << " It came from a plain decode step (no verification or catch-up appended it); the "
           "sequence's last traced events:";
    culprit = events.size() - 1;
    while (culprit > 0 && events[culprit]->first_position > position)
      --culprit;
  } else {
    out << " Appended at step " << events[culprit]->step << " by:";
  }
  const std::size_t from = culprit + 1 > context ? culprit + 1 - context : 0;
  for (std::size_t i = from; i <= culprit; ++i)
    out << "\n  " << (i == culprit ? "-> " : "   ") << trace_detail::describe(*events[i]);
  return out.str();
}

}  // namespace weft::test_support
