#include "runtime/sampling/beam_search.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "weft/error.hpp"

namespace weft::sampling {

BeamSearch::BeamSearch(Config config) : config_(std::move(config)) {
  config_.width = std::max(1, config_.width);
  config_.max_tokens = std::max(1, config_.max_tokens);
  live_.emplace_back();
}

double BeamSearch::score(double sum, int length) const {
  return sum / std::pow(static_cast<double>(std::max(1, length)),
                        static_cast<double>(config_.length_penalty));
}

void BeamSearch::add_finished(Hypothesis h) {
  // Stable: a later hypothesis goes after every earlier one of the same score.
  auto at = std::upper_bound(finished_.begin(), finished_.end(), h.score,
                             [](double s, const Hypothesis& e) { return s > e.score; });
  finished_.insert(at, std::move(h));
  if (static_cast<int>(finished_.size()) > config_.width) finished_.pop_back();
}

bool BeamSearch::can_improve() const {
  if (static_cast<int>(finished_.size()) < config_.width) return true;
  const double worst = finished_.back().score;
  for (const Beam& b : live_) {
    const int length = static_cast<int>(b.tokens.size());
    const double best =
        std::max(score(b.sum, length + 1), score(b.sum, std::max(length + 1, config_.max_tokens)));
    if (best > worst) return true;
  }
  return false;
}

std::vector<BeamSearch::Extension> BeamSearch::step(
    std::span<const std::vector<TokenLogprob>> rows) {
  if (done_) throw Error(ErrorCode::kInvalidArgument, "beam search: step() after done()");
  if (rows.size() != live_.size()) {
    throw Error(ErrorCode::kInvalidArgument, "beam search: " + std::to_string(rows.size()) +
                                                 " rows for " + std::to_string(live_.size()) +
                                                 " live beams");
  }
  struct Ranked {
    double sum;
    int parent;
    std::int32_t token;
    float logprob;
  };
  std::vector<Ranked> ranked;
  for (std::size_t b = 0; b < rows.size(); ++b) {
    for (const TokenLogprob& t : rows[b]) {
      if (!std::isfinite(t.logprob)) continue;  // masked: impossible
      ranked.push_back({live_[b].sum + t.logprob, static_cast<int>(b), t.id, t.logprob});
    }
  }
  std::sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
    if (a.sum != b.sum) return a.sum > b.sum;
    if (a.parent != b.parent) return a.parent < b.parent;
    return a.token < b.token;
  });
  const auto is_stop = [this](std::int32_t t) {
    return std::find(config_.stop_ids.begin(), config_.stop_ids.end(), t) != config_.stop_ids.end();
  };
  std::vector<Extension> extensions;
  std::vector<Beam> next;
  for (std::size_t r = 0; r < ranked.size(); ++r) {
    if (static_cast<int>(next.size()) == config_.width) break;
    const Ranked& c = ranked[r];
    Beam beam = live_[static_cast<std::size_t>(c.parent)];
    beam.tokens.push_back(c.token);
    beam.logprobs.push_back(c.logprob);
    beam.sum = c.sum;
    if (is_stop(c.token)) {
      if (static_cast<int>(r) < config_.width) {
        const double s = score(beam.sum, static_cast<int>(beam.tokens.size()));
        add_finished({std::move(beam), s, true});
      }
      continue;
    }
    extensions.push_back({c.parent, c.token, c.logprob});
    next.push_back(std::move(beam));
  }
  // Beams at max_tokens are finished; they leave the live set (and the returned extensions).
  std::vector<Extension> kept_ext;
  std::vector<Beam> kept;
  for (std::size_t i = 0; i < next.size(); ++i) {
    if (static_cast<int>(next[i].tokens.size()) >= config_.max_tokens) {
      const double s = score(next[i].sum, static_cast<int>(next[i].tokens.size()));
      add_finished({std::move(next[i]), s, false});
    } else {
      kept_ext.push_back(extensions[i]);
      kept.push_back(std::move(next[i]));
    }
  }
  live_ = std::move(kept);
  if (live_.empty() || !can_improve()) {
    done_ = true;
    live_.clear();
    return {};
  }
  return kept_ext;
}

std::vector<BeamSearch::Hypothesis> BeamSearch::best(int n) const {
  const auto count = std::min(finished_.size(), static_cast<std::size_t>(std::max(0, n)));
  return {finished_.begin(), finished_.begin() + static_cast<std::ptrdiff_t>(count)};
}

}  // namespace weft::sampling
