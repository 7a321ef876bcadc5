#include "runtime/text/stop_strings.hpp"

#include <algorithm>

namespace weft::text {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings) {
  for (auto& s : stop_strings) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopStringMatcher::Output StopStringMatcher::push(std::string_view delta) {
  Output out;
  if (stopped_) return out;
  held_.append(delta);
  // Everything before held_ was already shown and could not begin any stop string, so a match
  // lies wholly inside held_: the earliest one wins, the first listed on a tie.
  std::size_t best_pos = std::string::npos;
  for (std::size_t i = 0; i < stops_.size(); ++i) {
    const std::size_t pos = held_.find(stops_[i]);
    if (pos < best_pos) {
      best_pos = pos;
      out.stopped = i;
    }
  }
  if (out.stopped) {
    out.text = held_.substr(0, best_pos);
    held_.clear();
    stopped_ = true;
    return out;
  }
  // Keep the longest tail of held_ that is a proper prefix of some stop string. Such a tail
  // starts where a stop string starts, so the cut never splits a UTF-8 character.
  std::size_t keep = 0;
  for (const auto& s : stops_) {
    for (std::size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  out.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStringMatcher::finish() {
  std::string rest = stopped_ ? std::string() : std::move(held_);
  held_.clear();
  return rest;
}

}  // namespace weft::text
