// The scheduler's share of speculative decoding (docs/speculative.md): which decoding
// sequences get a draft tree this step and how large, the tree's scratch pages, and what a
// verification commits.

#include <algorithm>

#include "runtime/scheduler/scheduler.hpp"

namespace weft::sched {

std::unordered_map<std::uint64_t, std::shared_ptr<const speculative::DraftTree>>
Scheduler::propose_drafts(const std::vector<std::uint64_t>& decoding, int budget, int other_rows) {
  std::unordered_map<std::uint64_t, std::shared_ptr<const speculative::DraftTree>> drafts;
  if (decoding.empty()) return drafts;
  // Turned down as the batch grows: each sequence's share of the step's draft budget.
  const int n = static_cast<int>(decoding.size());
  int share = std::min({speculation_.max_nodes, speculation_.step_budget / n, budget / n});
  if (speculation_.max_step_rows > 0) {
    share = std::min(share, (speculation_.max_step_rows - n - other_rows) / n);
  }
  if (share < 1) return drafts;
  // Each sequence's depth (what is left of its output), then every tree at once where the
  // speculator takes a batch.
  std::vector<Sequence*> asked;
  std::vector<SpeculationConfig::Ask> asks;
  for (std::uint64_t id : decoding) {
    Sequence& s = sequences_.at(id);
    // The root's own token is sampled by this step too: the tree holds at most what is left
    // of the output after it.
    const int left = s.max_new_tokens - s.generated() - 1;
    const int depth = std::min(speculation_.max_depth, left);
    if (depth < 1) continue;
    asked.push_back(&s);
    asks.push_back({&s, share, depth});
  }
  std::vector<speculative::DraftTree> proposed;
  if (speculation_.propose_batch) {
    if (!asks.empty()) proposed = speculation_.propose_batch(asks);
  } else {
    for (const auto& a : asks)
      proposed.push_back(speculation_.propose(*a.sequence, a.max_nodes, a.max_depth));
  }
  for (std::size_t k = 0; k < asked.size() && k < proposed.size(); ++k) {
    Sequence& s = *asked[k];
    const std::uint64_t id = s.id;
    const int depth = asks[k].max_depth;
    auto tree = std::make_shared<speculative::DraftTree>(std::move(proposed[k]));
    if (tree->empty()) continue;
    if (!speculation_.trees && !tree->is_chain()) {
      // Keep the first chain (nodes 0, 1, ... each the child of the one before).
      int keep = 0;
      while (keep < tree->size() && tree->parent[static_cast<std::size_t>(keep)] == keep - 1)
        ++keep;
      tree->tokens.resize(static_cast<std::size_t>(keep));
      tree->parent.resize(static_cast<std::size_t>(keep));
      if (tree->sampled()) {
        tree->q.resize(static_cast<std::size_t>(keep) + 1);
        tree->draws.resize(static_cast<std::size_t>(keep) + 1);
      }
    }
    if (tree->size() > share || tree->depth() > depth) continue;  // a speculator's bug: skip
    // Scratch slots after the root (the sequence's last token); pages only if free ones are
    // left now, so reserve admission's promise to the others holds (they go back when the step
    // completes).
    const int slots = static_cast<int>(s.tokens.size()) + tree->size();
    const int missing = pages_for(slots) - static_cast<int>(s.pages.size());
    if (missing > 0 && (missing > available_pages() || !grow_pages(s, slots))) continue;
    drafts.emplace(id, std::move(tree));
  }
  return drafts;
}

ScheduledSlice Scheduler::draft_slice(const Sequence& s, StepPlan& plan,
                                      std::shared_ptr<const speculative::DraftTree> tree) {
  // The sequence's uncomputed tokens (its last one, the root, after a catch-up's), then the
  // tree's nodes.
  const int root = static_cast<int>(s.tokens.size()) - 1;
  ScheduledSlice slice;
  slice.id = s.id;
  slice.token_begin = static_cast<int>(plan.tokens.size());
  slice.token_count = root - s.computed + 1 + tree->size();
  slice.first_position = s.computed;
  slice.samples = true;
  slice.page_table = s.pages;
  for (int p = s.computed; p <= root; ++p) {
    plan.tokens.push_back(s.tokens[static_cast<std::size_t>(p)]);
    plan.positions.push_back(p);
  }
  std::vector<int> depth(static_cast<std::size_t>(tree->size()));
  for (int j = 0; j < tree->size(); ++j) {
    const auto parent = tree->parent[static_cast<std::size_t>(j)];
    depth[static_cast<std::size_t>(j)] =
        parent < 0 ? 1 : depth[static_cast<std::size_t>(parent)] + 1;
    plan.tokens.push_back(tree->tokens[static_cast<std::size_t>(j)]);
    plan.positions.push_back(root + depth[static_cast<std::size_t>(j)]);
  }
  speculation_stats_.verifications += 1;
  speculation_stats_.draft_tokens += static_cast<std::uint64_t>(tree->size());
  slice.draft = std::move(tree);
  return slice;
}

bool Scheduler::catches_up(const Sequence& s, int count) const {
  // Only what a verification left: other chunks of output (tokens a grammar forced, a
  // preempted sequence's recomputation) run as they run without speculation.
  return s.catching_up && count > 1 && s.computed >= s.prompt_len;
}

void Scheduler::trace_slice(const StepPlan& plan, const Sequence& s, const ScheduledSlice& slice,
                            const VerifiedDraft* verified) const {
  SpeculationTraceEvent e;
  e.step = plan.step;
  e.sequence = s.id;
  e.prompt_len = s.prompt_len;
  e.first_position = slice.first_position;
  e.verification = slice.draft != nullptr;
  if (slice.draft) e.catch_up = slice.root_position() - slice.first_position;
  e.tokens.assign(plan.tokens.begin() + slice.token_begin,
                  plan.tokens.begin() + slice.token_begin + slice.token_count);
  if (slice.draft) e.parent = slice.draft->parent;
  if (verified != nullptr) {
    e.accepted = verified->accepted;
    e.appended = verified->tokens;
  } else if (slice.samples &&
             static_cast<int>(s.tokens.size()) > slice.first_position + slice.token_count) {
    e.appended.push_back(s.tokens.back());
  }
  e.computed = s.computed;
  speculation_.trace(e);
}

void Scheduler::complete_draft(Sequence& s, const ScheduledSlice& slice,
                               const VerifiedDraft& verified) {
  // The root's KV is in place (and a catch-up's before it); so is each accepted node k whose
  // slot (root + 1 + its index) is its position (root + 1 + k): the first chain's prefix. The
  // others were written to scratch slots and are computed again by the next step, never copied.
  const int root = slice.root_position();
  int in_place = 1;
  for (std::size_t k = 0; k < verified.accepted.size() && k < verified.tokens.size(); ++k) {
    if (verified.accepted[k] != static_cast<int>(k)) break;
    ++in_place;
  }
  const int room = s.max_new_tokens - s.generated();
  const int appended = std::min(static_cast<int>(verified.tokens.size()), std::max(0, room));
  s.tokens.insert(s.tokens.end(), verified.tokens.begin(), verified.tokens.begin() + appended);
  s.computed = std::min(root + in_place, static_cast<int>(s.tokens.size()) - 1);
  s.catching_up = static_cast<int>(s.tokens.size()) - s.computed > 1;
  speculation_stats_.accepted_tokens += verified.accepted.size();
  speculation_stats_.appended_tokens += static_cast<std::uint64_t>(appended);
  // Scratch pages past what the sequence's tokens need go back now.
  const int keep = std::max(pages_for(static_cast<int>(s.tokens.size())), pages_for(s.computed));
  while (static_cast<int>(s.pages.size()) > keep) {
    pool_.release(s.pages.back());
    s.pages.pop_back();
  }
}

}  // namespace weft::sched
