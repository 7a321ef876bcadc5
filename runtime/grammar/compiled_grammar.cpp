// CompiledGrammar (grammar_matcher.hpp): a grammar's positions laid out once, each rule's
// static context, the masks computed on first use and kept (per position, per place, per
// count), and the shared cache of stack-dependent verdicts. The walk that computes one mask is
// in compiled_grammar_precompute.cpp.
#include <algorithm>

#include "runtime/grammar/grammar_matcher.hpp"

namespace weft::grammar {

Result<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::compile(
    const Grammar& grammar, std::shared_ptr<const TokenTrie> trie, const CompileLimits& limits) {
  if (!trie)
    return Error(ErrorCode::kInvalidArgument, "no vocabulary given to compile the grammar for");
  auto flat = flatten_grammar(grammar, limits);
  if (!flat) return flat.error();
  return compile(std::move(*flat), std::move(trie));
}

Result<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::compile(
    FlatGrammar flat, std::shared_ptr<const TokenTrie> trie) {
  if (!trie)
    return Error(ErrorCode::kInvalidArgument, "no vocabulary given to compile the grammar for");
  auto cg = std::shared_ptr<CompiledGrammar>(new CompiledGrammar());
  cg->g_ = std::move(flat);
  cg->trie_ = std::move(trie);
  const auto& g = cg->g_;
  std::uint32_t slots = 0;
  for (const auto& rule : g.rules) {
    cg->rule_base_.push_back(static_cast<std::uint32_t>(cg->alt_base_.size()));
    for (const auto& seq : rule.alts) {
      cg->alt_base_.push_back(slots);
      slots += static_cast<std::uint32_t>(seq.size());
    }
  }
  cg->slot_mask_.assign(slots, -1);
  cg->slot_site_base_.assign(slots, -1);
  cg->compute_contexts();
  // Mask indices: every byte position's own mask first, then the per-place ones of the rules
  // that have places (rule_sites_), one per position and place.
  for (std::uint32_t r = 0; r < g.rules.size(); ++r)
    for (std::uint32_t a = 0; a < g.rules[r].alts.size(); ++a)
      for (std::uint32_t p = 0; p < g.rules[r].alts[a].size(); ++p) {
        if (g.rules[r].alts[a][p].is_rule) continue;
        cg->slot_mask_[cg->slot(Frame{r, a, p})] = static_cast<std::int32_t>(cg->specs_.size());
        cg->specs_.push_back(MaskSpec{Frame{r, a, p}, -1});
      }
  cg->slot_positions_ = cg->specs_.size();
  for (std::uint32_t r = 0; r < g.rules.size(); ++r) {
    const auto sites = static_cast<std::int32_t>(cg->rule_sites_[r].size());
    if (sites == 0) continue;
    for (std::uint32_t a = 0; a < g.rules[r].alts.size(); ++a)
      for (std::uint32_t p = 0; p < g.rules[r].alts[a].size(); ++p) {
        if (g.rules[r].alts[a][p].is_rule) continue;
        cg->slot_site_base_[cg->slot(Frame{r, a, p})] =
            static_cast<std::int32_t>(cg->specs_.size());
        for (std::int32_t i = 0; i < sites; ++i)
          cg->specs_.push_back(MaskSpec{Frame{r, a, p}, i});
      }
  }
  cg->masks_ = std::make_unique<std::atomic<const PositionMask*>[]>(cg->specs_.size());
  for (std::size_t i = 0; i < cg->specs_.size(); ++i)
    cg->masks_[i].store(nullptr, std::memory_order_relaxed);
  cg->rule_mode_ = std::make_unique<std::atomic<std::uint8_t>[]>(g.rules.size());
  for (std::size_t r = 0; r < g.rules.size(); ++r)
    cg->rule_mode_[r].store(0, std::memory_order_relaxed);
  return std::shared_ptr<const CompiledGrammar>(std::move(cg));
}

CompiledGrammar::~CompiledGrammar() {
  if (!masks_) return;
  for (std::size_t i = 0; i < specs_.size(); ++i)
    delete masks_[i].load(std::memory_order_acquire);
}

const CompiledGrammar::PositionMask& CompiledGrammar::mask(std::uint32_t i) const {
  if (const PositionMask* m = masks_[i].load(std::memory_order_acquire)) return *m;
  const MaskSpec& spec = specs_[i];
  const Frame& f = spec.frame;
  // Inner copies of a bounded repetition reuse their outermost copy's verdicts for the tokens
  // short enough not to tell them apart (same alternative and element: copies differ only in
  // the rule element that chains to the next copy, which comes last).
  const PositionMask* ref = nullptr;
  std::size_t skip_len = 0;
  const std::uint32_t outer = g_.repeat_outer[f.rule];
  if (spec.site < 0 && outer != FlatGrammar::kNoRule && outer != f.rule) {
    ref = &mask(static_cast<std::uint32_t>(slot_mask_[slot(Frame{outer, f.alt, f.pos})]));
    skip_len = g_.repeat_left[f.rule];
  }
  std::unique_ptr<Scratch> scratch = take_scratch();
  auto computed = std::make_unique<PositionMask>();
  // A context resting on a counted element is only known with its count (counted_mask()); the
  // shared mask then takes the stack below as unknown.
  if (spec.site < 0) {
    if (contexts_[f.rule].counted) {
      precompute(f.rule, f.alt, f.pos, StaticContext{kContextNode, {}, f.rule}, *computed,
                 *scratch);
    } else {
      precompute(f.rule, f.alt, f.pos, contexts_[f.rule], *computed, *scratch, ref, skip_len);
    }
  } else {
    const Frame& site = rule_sites_[f.rule][static_cast<std::size_t>(spec.site)];
    StaticContext ctx = contexts_[site.rule];
    if (ctx.counted) ctx = StaticContext{kContextNode, {}, site.rule};
    ctx.frames.push_back(site);
    precompute(f.rule, f.alt, f.pos, ctx, *computed, *scratch);
  }
  give_scratch(std::move(scratch));
  // Another thread may have finished the same mask meanwhile: the first one stays.
  const PositionMask* expected = nullptr;
  if (masks_[i].compare_exchange_strong(expected, computed.get(), std::memory_order_acq_rel,
                                        std::memory_order_acquire))
    return *computed.release();
  return *expected;
}

std::unique_ptr<CompiledGrammar::Scratch> CompiledGrammar::take_scratch() const {
  {
    std::lock_guard lock(scratch_mutex_);
    if (!scratch_.empty()) {
      auto scratch = std::move(scratch_.back());
      scratch_.pop_back();
      return scratch;
    }
  }
  return std::make_unique<Scratch>(g_, sentinels_, trie_->max_token_bytes() + 2,
                                   trie_->vocab_size());
}

void CompiledGrammar::give_scratch(std::unique_ptr<Scratch> scratch) const {
  std::lock_guard lock(scratch_mutex_);
  scratch_.push_back(std::move(scratch));
}

std::uint32_t CompiledGrammar::count_bucket(const Element& e, std::uint32_t count) const {
  // A token of at most K - 1 bytes finishes at most K - 1 copies (each consumes a byte), so
  // remaining copies (max - count) or missing ones (min - count) of K or more look alike to
  // every token: the mask depends on both only up to K.
  const std::uint32_t k = counted_cap();
  const std::uint32_t left = e.max == kUnbounded ? k : std::min(e.max - count, k);
  const std::uint32_t missing = count >= e.min ? 0 : std::min(e.min - count, k);
  return left << 16 | missing;
}

const CompiledGrammar::PositionMask& CompiledGrammar::counted_mask(std::uint32_t i,
                                                                   std::uint32_t bucket,
                                                                   std::uint32_t count) const {
  const std::uint64_t key = std::uint64_t{i} << 32 | bucket;
  {
    std::lock_guard lock(counted_mutex_);
    if (auto it = counted_masks_.find(key); it != counted_masks_.end()) return *it->second;
  }
  const Frame& f = specs_[i].frame;
  StaticContext ctx = contexts_[f.rule];
  if (bucket == kUnknownCount) {
    ctx = StaticContext{kContextNode, {}, f.rule};
  } else {
    ctx.frames[0].count = count;
  }
  // A lower count's mask (any of the 64 below, computed already) decides the tokens of at most
  // `left` bytes (copies left at this count), or min(left, missing) where the two counts differ
  // in whether the repetition may end yet: such a token cannot finish enough copies to meet a
  // bound that differs, so it cannot tell the two counts apart (the argument of
  // FlatGrammar::repeat_left). Only the longer tokens are walked: along a bounded string, each
  // new count walks the few tokens longer than what is left of it.
  const PositionMask* ref = nullptr;
  std::size_t skip_len = 0;
  if (bucket != kUnknownCount && count > 0) {
    const Frame& cf = ctx.frames[0];
    const Element& e = g_.rules[cf.rule].alts[cf.alt][cf.pos];
    const std::uint32_t left = bucket >> 16, missing = bucket & 0xffff;
    std::lock_guard lock(counted_mutex_);
    for (std::uint32_t lower = count; lower-- > 0 && count - lower <= 64;) {
      const std::uint32_t lower_bucket = count_bucket(e, lower);
      auto it = counted_masks_.find(std::uint64_t{i} << 32 | lower_bucket);
      if (it == counted_masks_.end()) continue;
      // Where the lower count could not yet leave the repetition, a token finishing `missing`
      // copies and going on past it tells them apart (none can when neither may leave yet
      // within `missing` copies, or both may).
      const std::uint32_t lower_missing = lower_bucket & 0xffff;
      const std::size_t skip = lower_missing == 0 ? left : std::min(left, missing);
      if (skip == 0) break;
      ref = it->second.get();
      skip_len = skip;
      break;
    }
  }
  std::unique_ptr<Scratch> scratch = take_scratch();
  auto computed = std::make_unique<PositionMask>();
  precompute(f.rule, f.alt, f.pos, ctx, *computed, *scratch, ref, skip_len);
  give_scratch(std::move(scratch));
  std::lock_guard lock(counted_mutex_);
  auto [it, inserted] = counted_masks_.try_emplace(key, std::move(computed));
  return *it->second;
}

CompiledGrammar::MaskRef CompiledGrammar::mask_index(const StackArena& arena, NodeId top) const {
  const Frame& f = arena[top].frame;
  const std::uint32_t s = slot(f);
  auto base = static_cast<std::uint32_t>(slot_mask_[s]);
  const StaticContext& ctx = contexts_[f.rule];
  if (ctx.counted) {
    // The counted frame lies ctx.frames.size() frames below the top.
    NodeId p = top;
    for (std::size_t k = 0; k < ctx.frames.size() && p > kContextNode; ++k)
      p = arena[p].parent;
    if (p > kContextNode) {
      const Frame& cf = arena[p].frame;
      const Frame& want = ctx.frames[0];
      if (cf.rule == want.rule && cf.alt == want.alt && cf.pos == want.pos) {
        // A frame holding several counts (Frame::count_span) has one mask if its counts share a
        // bucket (the bucket is monotone in the count, so its two ends decide); otherwise the
        // stack below is taken as unknown, and the real stacks decide the tokens that leave.
        const Element& e = g_.rules[cf.rule].alts[cf.alt][cf.pos];
        const std::uint32_t bucket = count_bucket(e, cf.count);
        if (cf.count_span == 0 || count_bucket(e, cf.count_hi()) == bucket)
          return {base, bucket, cf.count};
      }
    }
    return {base, kUnknownCount, 0};  // unreachable when the context is right; still sound
  }
  if (slot_site_base_[s] < 0 || !per_site(f.rule)) return {base, kNoBucket, 0};
  const auto& sites = rule_sites_[f.rule];
  const Frame& below = arena[arena[top].parent].frame;
  for (std::uint32_t i = 0; i < sites.size(); ++i)
    if (sites[i] == below)
      return {static_cast<std::uint32_t>(slot_site_base_[s]) + i, kNoBucket, 0};
  return {base, kNoBucket, 0};  // unreachable when the sites are complete
}

bool CompiledGrammar::per_site(std::uint32_t r) const {
  if (rule_sites_[r].empty()) return false;
  std::uint8_t mode = rule_mode_[r].load(std::memory_order_acquire);
  if (mode != 0) return mode == 2;
  // Rules used from a few places whose positions leave many tokens stack-dependent (a shared
  // x inside x{0,n}, for one) use a mask per place instead, within a bound on the masks one
  // rule adds, so a first use stays bounded.
  constexpr std::size_t kMinUncertain = 256;
  constexpr std::size_t kMaxExtraMasks = 2048;
  std::size_t uncertain = 0, positions = 0;
  for (std::uint32_t a = 0; a < g_.rules[r].alts.size(); ++a)
    for (std::uint32_t p = 0; p < g_.rules[r].alts[a].size(); ++p)
      if (!g_.rules[r].alts[a][p].is_rule) {
        ++positions;
        uncertain +=
            mask(static_cast<std::uint32_t>(slot_mask_[slot(Frame{r, a, p})])).uncertain.size();
      }
  mode = uncertain >= kMinUncertain && positions * rule_sites_[r].size() <= kMaxExtraMasks ? 2 : 1;
  rule_mode_[r].store(mode, std::memory_order_release);
  return mode == 2;
}

void CompiledGrammar::precompute_all(const std::atomic<bool>* cancel) const {
  auto cancelled = [&] { return cancel != nullptr && cancel->load(std::memory_order_relaxed); };
  for (std::uint32_t r = 0; r < g_.rules.size() && !cancelled(); ++r)
    per_site(r);
  for (std::uint32_t i = 0; i < specs_.size() && !cancelled(); ++i) {
    const MaskSpec& spec = specs_[i];
    // Masks resting on a counted element are computed per count: here for its first copy
    // (what a sequence meets first); the later counts' on use.
    if (spec.site < 0 && contexts_[spec.frame.rule].counted) {
      const Frame& cf = contexts_[spec.frame.rule].frames[0];
      counted_mask(i, count_bucket(g_.rules[cf.rule].alts[cf.alt][cf.pos], 0), 0);
      continue;
    }
    if (spec.site < 0 || per_site(spec.frame.rule)) mask(i);
  }
}

std::size_t CompiledGrammar::KeyHash::operator()(
    const std::vector<std::uint32_t>& key) const noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::uint32_t v : key)
    h = (h ^ v) * 0x100000001b3ull;
  return static_cast<std::size_t>(h ^ (h >> 32));
}

bool CompiledGrammar::find_dependent(const std::vector<std::uint32_t>& key,
                                     std::vector<std::int32_t>& tokens) const {
  std::lock_guard lock(dependent_mutex_);
  auto it = dependent_.find(key);
  if (it == dependent_.end()) return false;
  tokens = it->second;
  return true;
}

void CompiledGrammar::store_dependent(const std::vector<std::uint32_t>& key,
                                      const std::vector<std::int32_t>& tokens) const {
  std::lock_guard lock(dependent_mutex_);
  if (dependent_.size() < kMaxDependent) dependent_.try_emplace(key, tokens);
}

std::size_t CompiledGrammar::computed_mask_count() const {
  std::size_t n = 0;
  for (std::size_t i = 0; i < specs_.size(); ++i)
    n += masks_[i].load(std::memory_order_acquire) != nullptr;
  std::lock_guard lock(counted_mutex_);
  return n + counted_masks_.size();
}

void CompiledGrammar::compute_contexts() {
  const auto& g = g_;
  const std::size_t n = g.rules.size();
  constexpr std::uint32_t kRootSite = 0xffffffffu;
  // Per rule: where it is referenced other than in tail position, and which rules call it in
  // tail position (their frame is replaced, so their context becomes its context).
  std::vector<std::vector<Frame>> sites(n);
  std::vector<std::vector<std::uint32_t>> tail_callers(n);
  for (std::uint32_t r = 0; r < n; ++r)
    for (std::uint32_t a = 0; a < g.rules[r].alts.size(); ++a) {
      const auto& seq = g.rules[r].alts[a];
      for (std::uint32_t p = 0; p < seq.size(); ++p) {
        if (!seq[p].is_rule) continue;
        // A counted element keeps its frame (to count), so it is a place, not a tail call.
        if (p + 1 == seq.size() && !seq[p].counted()) {
          if (seq[p].index != r) tail_callers[seq[p].index].push_back(r);
        } else {
          sites[seq[p].index].push_back(Frame{r, a, p});
        }
      }
    }
  // The distinct frames that can sit below a frame of rule r (kRootSite: the stack's bottom),
  // stopping at two since only a unique one is useful.
  auto context_sites = [&](std::uint32_t r, std::size_t limit) {
    std::vector<Frame> found;
    std::vector<bool> seen(n, false);
    std::vector<std::uint32_t> todo{r};
    seen[r] = true;
    while (!todo.empty() && found.size() < limit) {
      std::uint32_t q = todo.back();
      todo.pop_back();
      if (q == g.root) found.push_back(Frame{kRootSite, 0, 0});
      for (const Frame& f : sites[q])
        if (std::find(found.begin(), found.end(), f) == found.end()) found.push_back(f);
      for (std::uint32_t c : tail_callers[q])
        if (!seen[c]) {
          seen[c] = true;
          todo.push_back(c);
        }
    }
    return found;
  };
  auto counted_site = [&](const Frame& f) {
    return f.rule != kRootSite && g.rules[f.rule].alts[f.alt][f.pos].counted();
  };
  contexts_.assign(n, StaticContext{});
  // Depth-bounded; a rule already on the chain ends it (recursion).
  constexpr std::size_t kMaxDepth = 8;
  for (std::uint32_t r = 0; r < n; ++r) {
    StaticContext ctx;
    ctx.bottom_rule = r;
    std::vector<std::uint32_t> chain{r};
    std::uint32_t q = r;
    while (ctx.frames.size() < kMaxDepth) {
      auto found = context_sites(q, 2);
      if (found.size() != 1) break;
      if (found[0].rule == kRootSite) {
        ctx.bottom = kRootNode;
        break;
      }
      if (std::find(chain.begin(), chain.end(), found[0].rule) != chain.end()) break;
      ctx.frames.insert(ctx.frames.begin(), found[0]);
      q = found[0].rule;
      ctx.bottom_rule = q;
      chain.push_back(q);
      // Below a counted element the masks depend on its count (counted_mask): the context
      // ends there, so they depend on no other.
      if (counted_site(found[0])) {
        ctx.counted = true;
        break;
      }
    }
    contexts_[r] = std::move(ctx);
  }
  // Candidates for a mask per place (see rule_sites_; compile() picks among them).
  constexpr std::size_t kMaxSites = 64;
  rule_sites_.assign(n, {});
  for (std::uint32_t r = 0; r < n; ++r) {
    auto found = context_sites(r, kMaxSites + 1);
    if (found.size() < 2 || found.size() > kMaxSites) continue;
    if (std::any_of(found.begin(), found.end(),
                    [&](const Frame& f) { return f.rule == kRootSite || counted_site(f); }))
      continue;
    rule_sites_[r] = std::move(found);
  }
}

std::pair<std::string, std::size_t> CompiledGrammar::largest_uncertain() const {
  precompute_all();
  std::pair<std::string, std::size_t> best{"", 0};
  for (std::uint32_t r = 0; r < g_.rules.size(); ++r)
    for (std::uint32_t a = 0; a < g_.rules[r].alts.size(); ++a)
      for (std::uint32_t p = 0; p < g_.rules[r].alts[a].size(); ++p) {
        auto mi = per_site(r) || contexts_[r].counted ? -1 : slot_mask_[slot(Frame{r, a, p})];
        if (mi < 0) continue;
        const auto& m = mask(static_cast<std::uint32_t>(mi));
        if (m.uncertain.size() > best.second)
          best = {g_.rules[r].name + " alt " + std::to_string(a) + " pos " + std::to_string(p),
                  m.uncertain.size()};
      }
  return best;
}

std::size_t CompiledGrammar::uncertain_count() const {
  precompute_all();
  std::size_t n = 0;
  for (std::uint32_t i = 0; i < specs_.size(); ++i) {
    const MaskSpec& spec = specs_[i];
    if (spec.site < 0 && contexts_[spec.frame.rule].counted) continue;
    // A rule using per-place masks never consults its shared ones.
    if ((spec.site < 0) != per_site(spec.frame.rule)) n += mask(i).uncertain.size();
  }
  return n;
}

}  // namespace weft::grammar
