// Beam search's side of the scheduler: groups of beams admitted together, and forks that share
// their parent's KV pages instead of copying them.
#include <algorithm>
#include <map>
#include <string>

#include "runtime/scheduler/scheduler.hpp"

namespace weft::sched {

Result<void> Scheduler::add_beam(std::uint64_t id, std::vector<std::int32_t> prompt,
                                 int max_new_tokens, int width) {
  if (width < 1) {
    return Error(ErrorCode::kInvalidArgument,
                 "scheduler: beam width " + std::to_string(width) + " is outside [1, inf)");
  }
  const std::vector<KvDemand> demands(static_cast<std::size_t>(width),
                                      KvDemand{static_cast<int>(prompt.size()), max_new_tokens});
  const std::int64_t alone = peak_pages(demands, config_.page_size);
  if (alone > config_.num_pages) {
    return Error(ErrorCode::kResourceExhausted,
                 "beam search needs up to " + std::to_string(alone) + " KV pages (" +
                     std::to_string(width) + " beams of " + std::to_string(prompt.size()) +
                     " prompt + " + std::to_string(max_new_tokens) +
                     " new tokens) but the pool has " + std::to_string(config_.num_pages));
  }
  if (auto added = add(id, std::move(prompt), max_new_tokens); !added) return added;
  sequences_.at(id).beam_group = id;
  beam_groups_[id] = BeamGroup{width, 1};
  return {};
}

Result<void> Scheduler::fork(std::uint64_t parent_id, std::uint64_t child,
                             std::span<const std::int32_t> extra) {
  auto it = sequences_.find(parent_id);
  if (it == sequences_.end() || it->second.beam_group == 0) {
    return Error(ErrorCode::kInvalidArgument,
                 "scheduler: fork of " + std::to_string(parent_id) + ", which is not a beam");
  }
  // A parent not running (preempted under optimistic admission since its row was sampled)
  // has no pages: the child then waits, as it does, to be prefilled from scratch.
  const bool running = std::find(running_.begin(), running_.end(), parent_id) != running_.end();
  if (sequences_.count(child) != 0) {
    return Error(ErrorCode::kInvalidArgument,
                 "scheduler: request id " + std::to_string(child) + " is already live");
  }
  const Sequence& parent = it->second;
  Sequence seq;
  seq.id = child;
  seq.tokens = parent.tokens;
  seq.tokens.insert(seq.tokens.end(), extra.begin(), extra.end());
  seq.prompt_len = parent.prompt_len;
  seq.max_new_tokens = parent.max_new_tokens;
  seq.cached_tokens = parent.cached_tokens;
  seq.beam_group = parent.beam_group;
  seq.group = parent.group;  // a beam group's members step together
  // Full pages whose every token is computed hold exactly what the child's would: share them.
  // The partial last page is written by both, so the child recomputes its tokens (at least
  // one token must be left to compute: its logits give the child's next token).
  const int computable = std::min(parent.computed, static_cast<int>(seq.tokens.size()) - 1);
  const int pages = std::min(computable / config_.page_size, static_cast<int>(parent.pages.size()));
  for (int i = 0; i < pages; ++i) {
    const std::int32_t page = parent.pages[static_cast<std::size_t>(i)];
    pool_.retain(page);
    seq.pages.push_back(page);
  }
  seq.computed = pages * config_.page_size;
  ++beam_groups_[seq.beam_group].members;
  sequences_.emplace(child, std::move(seq));
  if (running) {
    running_.push_back(child);  // the group's admission reserved its KV
  } else {
    waiting_.push_front(child);
  }
  return {};
}

void Scheduler::leave_beam_group(const Sequence& s) {
  if (s.beam_group == 0) return;
  auto g = beam_groups_.find(s.beam_group);
  if (g != beam_groups_.end() && --g->second.members <= 0) beam_groups_.erase(g);
}

void Scheduler::add_beam_demands(std::vector<KvDemand>& demands, const Sequence* candidate) const {
  std::map<std::uint64_t, KvDemand> longest;  // per group
  auto consider = [&](const Sequence& s) {
    if (s.beam_group == 0) return;
    KvDemand d{static_cast<int>(s.tokens.size()), s.max_new_tokens - s.generated()};
    auto [at, fresh] = longest.emplace(s.beam_group, d);
    if (!fresh &&
        d.tokens_now + d.tokens_to_come > at->second.tokens_now + at->second.tokens_to_come) {
      at->second = d;
    }
  };
  for (std::uint64_t id : running_)
    consider(sequences_.at(id));
  if (candidate != nullptr) consider(*candidate);
  for (const auto& [group, d] : longest) {
    auto g = beam_groups_.find(group);
    const int width = g != beam_groups_.end() ? g->second.width : 1;
    demands.insert(demands.end(), static_cast<std::size_t>(width), d);
  }
}

}  // namespace weft::sched
