#include "runtime/scheduler/scheduler.hpp"

#include <algorithm>
#include <iterator>
#include <string>

#include "runtime/scheduler/admission.hpp"

namespace weft::sched {

int StepPlan::sampling_slices() const {
  return static_cast<int>(
      std::count_if(slices.begin(), slices.end(), [](const auto& s) { return s.samples; }));
}

Scheduler::Scheduler(SchedulerConfig config)
    : config_(config),
      owned_pool_(std::make_unique<kv::PagePool>(config.num_pages, std::max(1, config.page_size))),
      pool_(*owned_pool_) {
  check_config();
  if (config_.prefix_cache) cache_ = std::make_unique<kv::PrefixCache>(pool_);
}

Scheduler::Scheduler(SchedulerConfig config, kv::PagePool& pool) : config_(config), pool_(pool) {
  check_config();
  if (config_.page_size != pool_.page_size() ||
      (config_.num_pages != 0 && config_.num_pages != pool_.num_pages())) {
    throw Error(ErrorCode::kInvalidArgument,
                "scheduler: configured for " + std::to_string(config_.num_pages) + " pages of " +
                    std::to_string(config_.page_size) + " tokens but lent a pool of " +
                    std::to_string(pool_.num_pages()) + " pages of " +
                    std::to_string(pool_.page_size()));
  }
  config_.num_pages = pool_.num_pages();
  if (config_.prefix_cache) cache_ = std::make_unique<kv::PrefixCache>(pool_);
}

Scheduler::~Scheduler() {
  for (const auto& [id, seq] : sequences_) {
    pool_.release_all(seq.pages);
    pool_.release_all(seq.cross_pages);
  }
  cache_.reset();  // its pages go back too
}

PrefixCacheStats Scheduler::prefix_cache_stats() const {
  PrefixCacheStats stats;
  stats.query_tokens = cache_query_tokens_;
  stats.hit_tokens = cache_hit_tokens_;
  if (cache_) {
    stats.cached_pages = cache_->cached_pages();
    stats.evictable_pages = pool_.evictable_pages();
    stats.evictions = cache_->evictions();
  }
  return stats;
}

int Scheduler::available_pages() const {
  return cache_ ? pool_.available_pages() : pool_.free_pages();
}

// A sequence's pages go back: to the prefix cache (its full computed pages) or the pool.
void Scheduler::release_pages(Sequence& seq) {
  // An encoder-decoder sequence's decoder KV depends on its source: never shared by tokens.
  if (cache_ && !seq.compressed && seq.source.empty()) {
    cache_->release(seq.tokens, seq.computed, seq.pages);
  } else {
    pool_.release_all(seq.pages);
  }
  seq.pages.clear();
  pool_.release_all(seq.cross_pages);
  seq.cross_pages.clear();
  seq.evicted = 0;
  seq.compressed = false;
}

void Scheduler::check_config() const {
  if (config_.page_size < 1 || config_.max_tokens_per_step < 1 || config_.max_running < 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "scheduler: page_size, max_tokens_per_step and max_running must be >= 1");
  }
  if (auto ok = kv::check(config_.kv_compress); !ok) {
    throw Error(ErrorCode::kInvalidArgument, std::string("scheduler: ") + ok.error().what());
  }
}

Result<void> Scheduler::add(std::uint64_t id, std::vector<std::int32_t> prompt,
                            int max_new_tokens) {
  if (prompt.empty()) return Error(ErrorCode::kInvalidArgument, "scheduler: empty prompt");
  if (max_new_tokens < 1) {
    return Error(ErrorCode::kInvalidArgument, "scheduler: max_new_tokens must be >= 1");
  }
  if (sequences_.count(id) != 0) {
    return Error(ErrorCode::kInvalidArgument,
                 "scheduler: request id " + std::to_string(id) + " is already live");
  }
  const std::int64_t alone =
      peak_pages({KvDemand{static_cast<int>(prompt.size()), max_new_tokens}}, config_.page_size);
  if (alone > config_.num_pages) {
    return Error(ErrorCode::kResourceExhausted,
                 "request needs up to " + std::to_string(alone) + " KV pages (" +
                     std::to_string(prompt.size()) + " prompt + " + std::to_string(max_new_tokens) +
                     " new tokens) but the pool has " + std::to_string(config_.num_pages));
  }
  Sequence seq;
  seq.id = id;
  seq.prompt_len = static_cast<int>(prompt.size());
  seq.tokens = std::move(prompt);
  seq.max_new_tokens = max_new_tokens;
  enqueue(sequences_.emplace(id, std::move(seq)).first->second);
  return {};
}

void Scheduler::enqueue(const Sequence& s) {
  if (config_.schedule == SchedulePolicy::kFirstCome) {
    waiting_.push_back(s.id);
    return;
  }
  // Behind the last waiting sequence that was preempted or has at least as many tokens to
  // come (scanning from the back keeps a long queue of equal lengths cheap to append to).
  const int to_come = s.max_new_tokens - s.generated();
  auto at = waiting_.end();
  while (at != waiting_.begin()) {
    const Sequence& w = sequences_.at(*std::prev(at));
    if (w.preemptions > 0 || w.max_new_tokens - w.generated() >= to_come) break;
    --at;
  }
  waiting_.insert(at, s.id);
}

Result<void> Scheduler::add_sibling(std::uint64_t id, std::uint64_t parent) {
  const Sequence* p = find(parent);
  if (p == nullptr) {
    return Error(ErrorCode::kInvalidArgument,
                 "scheduler: sibling of unknown request " + std::to_string(parent));
  }
  std::vector<std::int32_t> prompt(p->tokens.begin(), p->tokens.begin() + p->prompt_len);
  auto added = p->source.empty() ? add(id, std::move(prompt), p->max_new_tokens)
                                 : add_seq2seq(id, p->source, std::move(prompt), p->max_new_tokens);
  if (!added) return added;
  sequences_.at(id).share_prefix_of = parent;
  return {};
}

// Before a sibling's first chunk: take the parent's pages that hold only prompt tokens already
// computed, and start after them. The last prompt token is always recomputed (its logits give
// the sibling's first token), so at most one page of prompt is computed twice.
void Scheduler::share_prefix(Sequence& s) {
  const std::uint64_t parent_id = s.share_prefix_of;
  s.share_prefix_of = 0;  // once: after a preemption the sibling recomputes everything
  auto it = sequences_.find(parent_id);
  if (it == sequences_.end() || s.computed != 0 || !s.pages.empty()) return;
  const Sequence& parent = it->second;
  if (parent.evicted > 0) return;  // compacted pages no longer hold the prompt's prefix
  const int shareable = std::min(parent.computed, s.prompt_len - 1);
  const int pages = shareable / config_.page_size;
  if (pages <= 0 || static_cast<int>(parent.pages.size()) < pages) return;
  for (int i = 0; i < pages; ++i) {
    pool_.retain(parent.pages[static_cast<std::size_t>(i)]);
    s.pages.push_back(parent.pages[static_cast<std::size_t>(i)]);
  }
  s.computed = pages * config_.page_size;
}

bool Scheduler::remove(std::uint64_t id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return false;
  leave_beam_group(it->second);
  release_pages(it->second);
  sequences_.erase(it);
  if (auto r = std::find(running_.begin(), running_.end(), id); r != running_.end()) {
    running_.erase(r);
  } else if (auto w = std::find(waiting_.begin(), waiting_.end(), id); w != waiting_.end()) {
    waiting_.erase(w);
  }
  return true;
}

int Scheduler::append_tokens(std::uint64_t id, std::span<const std::int32_t> tokens) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return 0;
  Sequence& s = it->second;
  const int n = std::clamp(s.max_new_tokens - s.generated(), 0, static_cast<int>(tokens.size()));
  s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.begin() + n);
  return n;
}

const Sequence* Scheduler::find(std::uint64_t id) const {
  auto it = sequences_.find(id);
  return it == sequences_.end() ? nullptr : &it->second;
}

bool Scheduler::grow_pages(Sequence& seq, int positions) {
  const int missing = pages_for(positions - seq.evicted) - static_cast<int>(seq.pages.size());
  if (missing <= 0) return true;
  if (cache_) cache_->make_free(missing);
  return pool_.allocate(missing, seq.pages);
}

bool Scheduler::admission_allows(const Sequence& candidate) const {
  if (config_.admission == AdmissionPolicy::kOptimistic) return true;
  std::vector<KvDemand> demands;
  demands.reserve(running_.size() + 1);
  for (std::uint64_t id : running_) {
    const Sequence& s = sequences_.at(id);
    if (s.beam_group == 0) {
      demands.push_back({static_cast<int>(s.tokens.size()) - s.evicted,
                         s.max_new_tokens - s.generated(), fixed_pages(s)});
    }
  }
  add_beam_demands(demands, &candidate);
  if (candidate.beam_group == 0) {
    demands.push_back({static_cast<int>(candidate.tokens.size()),
                       candidate.max_new_tokens - candidate.generated(), fixed_pages(candidate)});
  }
  return peak_pages(std::move(demands), config_.page_size) <= config_.num_pages;
}

void Scheduler::preempt(std::uint64_t id, StepPlan& plan) {
  Sequence& seq = sequences_.at(id);
  release_pages(seq);  // with the prefix cache, its readmission may find them again
  seq.computed = 0;    // recompute: prompt and output so far are prefilled again
  seq.catching_up = false;
  seq.group = -1;
  ++seq.preemptions;
  ++preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), id));
  waiting_.push_front(id);
  plan.preempted.push_back(id);
}

StepPlan Scheduler::plan_step() {
  return plan_step(-1);
}

int Scheduler::group_size(int group) const {
  int n = 0;
  for (std::uint64_t id : running_)
    n += sequences_.at(id).group == group ? 1 : 0;
  return n;
}

StepPlan Scheduler::plan_step(int group) {
  if (groups_ <= 1) group = -1;  // one group: every running sequence
  // The sequences this plan may touch: all, or group `group`'s.
  const auto mine = [&](const Sequence& s) { return group < 0 || s.group == group; };
  StepPlan plan;
  plan.step = next_step_++;
  plan.group = group;
  // Groups: waiting sequences join this group while it holds fewer than its share.
  int members = group < 0 ? 0 : group_size(group);
  // (Of the sequences that may run at once: a long queue must not fill one group up to
  // max_running and leave the others empty.)
  const int may_run =
      std::min(static_cast<int>(running_.size() + waiting_.size()), config_.max_running);
  const int share = group < 0 ? 0 : (may_run + groups_ - 1) / groups_;
  int budget = config_.max_tokens_per_step;
  struct Choice {
    std::uint64_t id;
    int count;
    bool encode = false;  // an encoder-decoder sequence's encoder pass runs first
  };
  int encoded = 0;  // encoder passes in this step
  std::vector<Choice> chosen;

  // Decodes first: each running sequence with one token to feed. If their new pages do not
  // fit (only possible in optimistic mode), preempt the most recently admitted sequences.
  int decode_pages = 0;
  for (;;) {
    int needed = 0;
    int decodes = 0;
    for (std::uint64_t id : running_) {
      const Sequence& s = sequences_.at(id);
      if (!mine(s) || static_cast<int>(s.tokens.size()) - s.computed != 1) continue;
      if (++decodes > budget) break;
      needed +=
          std::max(0, pages_for(s.computed + 1 - s.evicted) - static_cast<int>(s.pages.size()));
    }
    decode_pages = needed;
    if (needed <= available_pages() || running_.empty()) break;
    // Another group's sequences may be in a step that is still running: never theirs.
    auto victim = std::find_if(running_.rbegin(), running_.rend(),
                               [&](std::uint64_t id) { return mine(sequences_.at(id)); });
    if (victim == running_.rend()) break;
    if (group >= 0) --members;
    preempt(*victim, plan);
  }
  // The prefix cache evicts the pages all decodes need at once (the same pages, in the same
  // order, as one eviction per sequence would), so a step walks the cache once.
  if (cache_ && decode_pages > 0) cache_->make_free(decode_pages);
  for (std::uint64_t id : running_) {
    Sequence& s = sequences_.at(id);
    if (!mine(s)) continue;
    if (static_cast<int>(s.tokens.size()) - s.computed != 1 || budget == 0) continue;
    if (!grow_pages(s, s.computed + 1)) continue;  // cannot happen after the loop above
    chosen.push_back({id, 1});
    --budget;
  }

  // Then prefill chunks of running sequences, then newly admitted ones, under the budget.
  auto prefill_chunk = [&](Sequence& s) {
    int chunk = std::min(static_cast<int>(s.tokens.size()) - s.computed, budget);
    if (speculation_.max_step_rows > 0 && catches_up(s, chunk)) {
      // Decode rows past the backend's exact bound would change every decode row's rounding.
      int rows = 0;
      for (const Choice& c : chosen)
        rows += c.count == 1 || catches_up(sequences_.at(c.id), c.count) ? c.count : 0;
      chunk = std::min(chunk, std::max(1, speculation_.max_step_rows - rows));
    }
    // Optimistic mode may find fewer free pages than the chunk wants: take what fits.
    const int fits = (static_cast<int>(s.pages.size()) + available_pages()) * config_.page_size -
                     (s.computed - s.evicted);
    chunk = std::min(chunk, fits);
    if (chunk <= 0 || !grow_pages(s, s.computed + chunk)) return 0;
    chosen.push_back({s.id, chunk});
    budget -= chunk;
    return chunk;
  };
  for (std::uint64_t id : running_) {
    Sequence& s = sequences_.at(id);
    if (budget == 0) break;
    if (mine(s) && static_cast<int>(s.tokens.size()) - s.computed > 1) prefill_chunk(s);
  }
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int>(running_.size()) < config_.max_running &&
         (group < 0 || members < share)) {
    Sequence& s = sequences_.at(waiting_.front());
    if (!admission_allows(s)) break;  // first come, first served: nobody skips ahead
    if (group >= 0 && s.beam_group != 0) {
      // A beam joins the group its running members step in.
      const auto other = std::find_if(running_.begin(), running_.end(), [&](std::uint64_t id) {
        const Sequence& r = sequences_.at(id);
        return r.beam_group == s.beam_group && r.group != group;
      });
      if (other != running_.end()) break;
    }
    if (s.share_prefix_of != 0) {
      // A sibling waits (first come, first served: so does everyone behind it) until its
      // parent has computed the pages it can share; a parent that is gone shares nothing.
      auto parent = sequences_.find(s.share_prefix_of);
      const int shareable = (s.prompt_len - 1) / config_.page_size * config_.page_size;
      if (parent != sequences_.end() && parent->second.computed < shareable) break;
      share_prefix(s);
    }
    // An encoder-decoder sequence's encoder pass runs in the step that admits it; its tokens
    // count against the budget, but one token is always left for its decoder, so a source
    // longer than the budget still runs (as the step's only encoder pass).
    const bool encodes = !s.source.empty() && s.cross_pages.empty();
    const int encoder_cost = encodes ? static_cast<int>(s.source.size()) : 0;
    if (encodes && encoded > 0 && encoder_cost >= budget) break;
    if (!take_cross_pages(s)) break;  // optimistic admission: too few free pages now
    const int budget_before = budget;
    budget -= std::min(encoder_cost, budget - 1);
    int hit = 0;
    const bool looked_up = cache_ && s.computed == 0 && s.pages.empty() && s.source.empty();
    if (looked_up) {
      // At least the last token is computed: its logits give the next token.
      hit = cache_->match(s.tokens, static_cast<int>(s.tokens.size()) - 1, s.pages);
      s.computed = hit;
    }
    if (prefill_chunk(s) == 0) {
      if (hit > 0) {  // not admitted after all: a waiting sequence holds no pages
        pool_.release_all(s.pages);
        s.pages.clear();
        s.computed = 0;
      }
      if (encodes) {  // nor cross pages
        pool_.release_all(s.cross_pages);
        s.cross_pages.clear();
        budget = budget_before;
      }
      break;
    }
    if (encodes) {
      chosen.back().encode = true;
      ++encoded;
    }
    if (looked_up) {
      if (s.preemptions == 0) s.cached_tokens = std::min(hit, s.prompt_len);
      cache_query_tokens_ += s.tokens.size();
      cache_hit_tokens_ += static_cast<std::uint64_t>(hit);
    }
    waiting_.pop_front();
    running_.push_back(s.id);
    plan.admitted.push_back(s.id);
    s.group = group;
    ++members;
  }

  std::unordered_map<std::uint64_t, std::shared_ptr<const speculative::DraftTree>> drafts;
  if (speculation_.enabled()) {
    std::vector<std::uint64_t> decoding;
    int other_rows = 0;
    for (const Choice& c : chosen) {
      const Sequence& s = sequences_.at(c.id);
      const bool whole = s.computed + c.count == static_cast<int>(s.tokens.size());
      if (whole && (c.count == 1 || catches_up(s, c.count))) {
        // A decode token, or a whole catch-up: its tree follows the catch-up in its slice.
        decoding.push_back(c.id);
        other_rows += c.count - 1;
      } else if (c.count == 1 || catches_up(s, c.count)) {
        other_rows += c.count;
      }
    }
    drafts = propose_drafts(decoding, budget, other_rows);
  }
  for (const Choice& c : chosen) {
    const Sequence& s = sequences_.at(c.id);
    if (auto d = drafts.find(c.id); d != drafts.end()) {
      plan.slices.push_back(draft_slice(s, plan, d->second));
      continue;
    }
    ScheduledSlice slice;
    slice.id = c.id;
    slice.token_begin = static_cast<int>(plan.tokens.size());
    slice.token_count = c.count;
    slice.first_position = s.computed;
    slice.samples = s.computed + c.count == static_cast<int>(s.tokens.size());
    slice.page_table = s.pages;
    slice.decode_rows = catches_up(s, c.count);
    slice.slot_offset = s.evicted;
    slice.compress_evict = compress_evict(s, c.count);
    if (slice.compress_evict > 0) slice.compress_window = config_.kv_compress.window;
    slice.compress_heads_vary = config_.kv_compress.heads == kv::KvCompressHeads::kVariable &&
                                (slice.compress_evict > 0 || slice.slot_offset > 0);
    if (!s.source.empty()) {
      slice.cross_page_table = s.cross_pages;
      slice.cross_length = static_cast<int>(s.source.size());
      if (c.encode) slice.encoder_tokens = s.source;
    }
    for (int i = 0; i < c.count; ++i) {
      plan.tokens.push_back(s.tokens[static_cast<std::size_t>(s.computed + i)]);
      plan.positions.push_back(s.computed + i);
    }
    plan.slices.push_back(std::move(slice));
  }
  return plan;
}

void Scheduler::complete_step(const StepPlan& plan, std::span<const std::int32_t> sampled,
                              std::span<const VerifiedDraft> verified) {
  std::size_t next = 0;
  std::size_t next_draft = 0;
  for (const ScheduledSlice& slice : plan.slices) {
    const bool samples = slice.samples && !slice.draft;
    const std::int32_t token = samples && next < sampled.size() ? sampled[next] : -1;
    if (samples) ++next;
    const VerifiedDraft* draft = nullptr;
    if (slice.draft) {
      if (next_draft < verified.size()) draft = &verified[next_draft];
      ++next_draft;
    }
    auto it = sequences_.find(slice.id);
    if (it == sequences_.end()) continue;  // removed while the step ran
    Sequence& s = it->second;
    if (s.computed != slice.first_position) continue;  // preempted and replanned since
    if (slice.draft) {
      if (draft != nullptr) complete_draft(s, slice, *draft);
      if (speculation_.trace) trace_slice(plan, s, slice, draft);
      continue;
    }
    s.computed += slice.token_count;
    if (s.computed + 1 >= static_cast<int>(s.tokens.size())) s.catching_up = false;
    if (slice.compress_evict > 0) complete_compression(s, slice);
    if (samples && token >= 0) s.tokens.push_back(token);
    if (slice.decode_rows && speculation_.trace) trace_slice(plan, s, slice, nullptr);
  }
}

int Scheduler::compress_evict(const Sequence& s, int count) const {
  if (!config_.kv_compress.enabled() || s.compressed || s.beam_group != 0 || !s.source.empty()) {
    return 0;
  }
  if (s.computed + count != static_cast<int>(s.tokens.size())) return 0;  // not its last chunk
  if (count == 1 && s.computed >= s.prompt_len) return 0;  // a decode step, not a prefill
  for (auto page : s.pages) {
    if (pool_.ref_count(page) != 1 || pool_.cached(page)) return 0;  // shared: not ours to rewrite
  }
  return kv::evicted_slots(s.computed + count - s.evicted, config_.kv_compress, config_.page_size);
}

// The forward pass compacted each head's survivors into the first slots: the pages past them
// go back to the pool (exactly compress_evict / page_size of them).
void Scheduler::complete_compression(Sequence& s, const ScheduledSlice& slice) {
  s.evicted += slice.compress_evict;
  s.compressed = true;
  ++compressions_;
  const auto keep = static_cast<std::size_t>(pages_for(s.computed - s.evicted));
  while (s.pages.size() > keep) {
    pool_.release(s.pages.back());
    s.pages.pop_back();
    ++compressed_pages_;
  }
}

}  // namespace weft::sched
