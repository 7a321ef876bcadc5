// Speculative decoding in the scheduler actor (docs/speculative.md): the scheduler asks for
// draft trees through the hooks set here, each request's proposal limits, and a verified
// draft's tokens cut at the first stop token and at max_tokens.
#include <algorithm>

#include "actors/scheduler_actor.hpp"

namespace weft::actors {

void SchedulerActor::set_speculation(std::unique_ptr<speculative::Speculator> speculator,
                                     sched::SpeculationConfig config, int width) {
  speculator_ = std::move(speculator);
  speculation_width_ = std::max(1, width);
  if (speculator_) {
    config.propose = [this](const sched::Sequence& s, int max_nodes, int max_depth) {
      return propose(s, max_nodes, max_depth);
    };
    // A step's proposals together: a draft model runs one forward per depth for them all.
    config.propose_batch = [this](const std::vector<sched::SpeculationConfig::Ask>& asks) {
      return propose_batch(asks);
    };
  }
  scheduler_.set_speculation(std::move(config));
}

std::optional<speculative::ProposalLimits> SchedulerActor::proposal_limits(const sched::Sequence& s,
                                                                           int max_nodes,
                                                                           int max_depth) const {
  auto it = live_.find(s.id);
  if (it == live_.end() || !it->second.speculate) return std::nullopt;
  speculative::ProposalLimits limits;
  limits.max_nodes = max_nodes;
  limits.max_depth = max_depth;
  if (const int cap = it->second.params.spec_tokens; cap > 0) {  // the request's own depth
    limits.max_depth = std::min(max_depth, cap);
    limits.max_nodes = std::min(max_nodes, cap * speculation_width_);
  }
  limits.width = speculation_width_;
  limits.temperature = it->second.params.temperature;
  limits.seed = it->second.params.seed.value_or(s.id) ^ static_cast<std::uint64_t>(s.generated());
  return limits;
}

speculative::DraftTree SchedulerActor::propose(const sched::Sequence& s, int max_nodes,
                                               int max_depth) {
  const auto limits = proposal_limits(s, max_nodes, max_depth);
  if (!limits) return {};
  return speculator_->propose(s.id, s.tokens, *limits);
}

std::vector<speculative::DraftTree> SchedulerActor::propose_batch(
    const std::vector<sched::SpeculationConfig::Ask>& asks) {
  std::vector<speculative::DraftTree> trees(asks.size());
  std::vector<speculative::ProposalRequest> requests;
  std::vector<std::size_t> at;  // the ask of each request
  for (std::size_t k = 0; k < asks.size(); ++k) {
    const sched::Sequence& s = *asks[k].sequence;
    if (auto limits = proposal_limits(s, asks[k].max_nodes, asks[k].max_depth)) {
      requests.push_back({s.id, s.tokens, *limits});
      at.push_back(k);
    }
  }
  if (requests.empty()) return trees;
  auto proposed = speculator_->propose_batch(requests);
  for (std::size_t r = 0; r < at.size() && r < proposed.size(); ++r)
    trees[at[r]] = std::move(proposed[r]);
  return trees;
}

sched::VerifiedDraft SchedulerActor::cut_verified(const VerifyOutcome& o) const {
  sched::VerifiedDraft d;
  auto it = live_.find(o.id);
  const sched::Sequence* seq = scheduler_.find(o.id);
  if (!o.error.empty() || it == live_.end() || seq == nullptr) return d;
  const int room = std::max(0, it->second.params.max_tokens - seq->generated());
  for (const auto& t : o.tokens) {
    if (static_cast<int>(d.tokens.size()) >= room) break;
    d.tokens.push_back(t.id);
    if (is_stop_token(it->second, t.id)) break;
  }
  d.accepted = o.accepted;
  return d;
}

}  // namespace weft::actors
