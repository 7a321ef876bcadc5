#include "runtime/grammar/grammar_matcher.hpp"

#include <algorithm>
#include <bit>
#include <functional>

namespace weft::grammar {
namespace {

enum : std::uint8_t { kReject = 0, kAccept = 1, kUncertain = 2 };

}  // namespace

Result<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::compile(
    const Grammar& grammar, std::shared_ptr<const TokenTrie> trie, const CompileLimits& limits) {
  if (!trie)
    return Error(ErrorCode::kInvalidArgument, "no vocabulary given to compile the grammar for");
  auto flat = flatten_grammar(grammar, limits);
  if (!flat) return flat.error();
  auto cg = std::shared_ptr<CompiledGrammar>(new CompiledGrammar());
  cg->g_ = std::move(*flat);
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

std::int32_t CompiledGrammar::Scratch::intern(const StackSet& s) {
  key.clear();
  auto put = [&](std::uint32_t x) { key.append(reinterpret_cast<const char*>(&x), sizeof x); };
  put(static_cast<std::uint32_t>(s.accepted) | static_cast<std::uint32_t>(s.left_context) << 1);
  for (const Cursor& c : s.cursors) {
    put(c.base);
    put(c.len);
    for (std::uint32_t i = 0; i < c.len; ++i) {
      const Frame& f = s.frames[c.begin + i];
      put(f.rule);
      put(f.alt);
      put(f.pos);
      put(f.count);
      put(f.count_span);
    }
  }
  if (auto it = index.find(key); it != index.end()) return it->second;
  if (states.size() >= kMaxStates) return -1;
  const auto id = static_cast<std::int32_t>(states.size());
  states.push_back(s);
  next.resize(next.size() + 256, -1);
  index.emplace(key, id);
  return id;
}

std::int32_t CompiledGrammar::Scratch::step(std::int32_t id, std::uint8_t byte) {
  const auto at = static_cast<std::size_t>(id) * 256 + byte;
  if (next[at] >= 0) return next[at];
  pda.step(states[static_cast<std::size_t>(id)], byte, stepped);
  if (stepped.overflow) return -1;  // incomplete: not a state
  const std::int32_t nid = intern(stepped);
  if (nid >= 0) next[at] = nid;
  return nid;
}

bool CompiledGrammar::Scratch::same_but_count(const StackSet& a, const StackSet& b,
                                              const FlatGrammar& g) {
  if (a.accepted != b.accepted || a.left_context != b.left_context ||
      a.cursors.size() != b.cursors.size())
    return false;
  bool counted = false;
  for (std::size_t i = 0; i < a.cursors.size(); ++i) {
    const Cursor &ca = a.cursors[i], &cb = b.cursors[i];
    if (ca.base != cb.base || ca.len != cb.len) return false;
    for (std::uint32_t k = 0; k < ca.len; ++k) {
      const Frame &fa = a.frames[ca.begin + k], &fb = b.frames[cb.begin + k];
      if (fa.rule != fb.rule || fa.alt != fb.alt || fa.pos != fb.pos) return false;
      if (fa.count == fb.count && fa.count_span == fb.count_span) continue;
      const Element& e = g.rules[fa.rule].alts[fa.alt][fa.pos];
      if (!e.counted() || fb.count != fa.count + 1 || fb.count_span != fa.count_span) return false;
      counted = true;
    }
  }
  return counted;
}

bool CompiledGrammar::Scratch::holds_string(std::int32_t id, StringClass klass,
                                            const FlatGrammar& g) {
  auto& known = klass == kStringUtf8 ? holds_utf8 : holds_ascii;
  if (known.size() <= static_cast<std::size_t>(id)) known.resize(states.size(), -1);
  if (known[static_cast<std::size_t>(id)] >= 0) return known[static_cast<std::size_t>(id)] == 1;
  // Breadth over (automaton state, memo id) pairs; a string's loop meets a handful (the
  // boundary and the continuation states of multi-byte characters).
  constexpr std::size_t kMaxPairs = 64;
  std::vector<std::pair<int, std::int32_t>> seen{{0, id}};
  auto same = [&](std::int32_t m) {
    return m == id || (m >= 0 && same_but_count(states[static_cast<std::size_t>(id)],
                                                states[static_cast<std::size_t>(m)], g));
  };
  bool ok = same(step(id, 'a'));
  for (std::size_t k = 0; k < seen.size() && ok; ++k) {
    const auto [q, m] = seen[k];
    for (int i = 0; i < 256 && ok; ++i) {
      const auto b = static_cast<std::uint8_t>(i);
      const int q2 = string_class_step(klass, q, b);
      if (q2 < 0) continue;
      const std::int32_t m2 = step(m, b);
      if (m2 < 0 || states[static_cast<std::size_t>(m2)].cursors.empty()) {
        ok = false;
        break;
      }
      // Back at a character boundary the set must be id again: a string's loop. Anything
      // else (a pattern's sets growing with each ':' of '.+:.+', a bounded string's copies)
      // is refused at its first such byte, so a failing check costs a step or two.
      if (q2 == 0) {
        if (!same(m2)) {
          ok = false;
          break;
        }
        continue;
      }
      const std::pair<int, std::int32_t> p{q2, m2};
      if (std::find(seen.begin(), seen.end(), p) != seen.end()) continue;
      if (seen.size() >= kMaxPairs) {
        ok = false;
        break;
      }
      seen.push_back(p);
    }
  }
  if (known.size() < states.size()) known.resize(states.size(), -1);
  known[static_cast<std::size_t>(id)] = ok ? 1 : 0;
  if (ok) {
    std::uint32_t h = 0xffffffffu;
    const StackSet& set = states[static_cast<std::size_t>(id)];
    for (const Frame& f : set.frames) {
      const Element& e = g.rules[f.rule].alts[f.alt][f.pos];
      if (e.counted() && e.max != kUnbounded) h = std::min(h, e.max - f.count_hi());
    }
    if (horizon.size() < states.size()) horizon.resize(states.size(), 0);
    horizon[static_cast<std::size_t>(id)] = h;
  }
  return ok;
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

// Walks the vocabulary trie from one position with an unknown stack below it. A token is
// accepted when some path consumes it without leaving the rule, or leaves the rule exactly at
// its last byte (the parent's continuation is always viable: every rule is productive). It is
// uncertain when a path leaves the rule with bytes to spare and the next byte can follow the
// rule somewhere; otherwise it is rejected everywhere.
void CompiledGrammar::precompute(std::uint32_t rule, std::uint32_t alt, std::uint32_t pos,
                                 const StaticContext& ctx, PositionMask& out, Scratch& scratch,
                                 const PositionMask* ref, std::size_t skip_len) const {
  const TokenTrie& trie = *trie_;
  Pushdown& pda = scratch.pda;
  auto& levels = scratch.levels;
  auto& kind = scratch.kind;
  const ByteSet& follow = g_.follow[ctx.bottom_rule];
  std::vector<std::int32_t> touched;
  levels[0].clear();
  levels[0].frames = ctx.frames;
  levels[0].frames.push_back(Frame{rule, alt, pos});
  levels[0].cursors.push_back(
      Cursor{ctx.bottom, 0, static_cast<std::uint32_t>(levels[0].frames.size())});

  if (scratch.states.size() >= Scratch::kMaxStates) scratch.clear_memo();
  auto& states = scratch.states;
  auto& next_id = scratch.next;
  // `id`: the memo id of the set at depth d (then levels[d] is unused), or -1 when the memo
  // is full and the set lives in levels[d].
  std::function<void(std::uint32_t, std::size_t, bool, std::int32_t)> walk =
      [&](std::uint32_t v, std::size_t d, bool uncertain, std::int32_t id) {
        const auto& node = trie.node(v);
        const StackSet& cur = id >= 0 ? states[static_cast<std::size_t>(id)] : levels[d];
        // Inside a free JSON string, the subtrees of string text (most of the vocabulary) are
        // accepted whole: the walk would find every token of them alive.
        std::uint8_t whole = 0;
        std::size_t horizon = 0;
        // A string's loop set is met within one character of the position (a UTF-8 character
        // is at most 4 bytes); deeper sets of it are the same id, already known.
        if (id >= 0 && node.child_count > 0 && d <= 4) {
          if (scratch.holds_string(id, kStringUtf8, g_))
            whole = kStringUtf8;
          else if (scratch.holds_string(id, kStringAscii, g_))
            whole = kStringAscii;
          if (whole) horizon = scratch.horizon[static_cast<std::size_t>(id)];
        }
        for (std::uint32_t ci = 0; ci < node.child_count; ++ci) {
          std::uint32_t c = node.first_child + ci;
          const auto& child = trie.node(c);
          // Only tokens longer than skip_len are decided here (ref has the others).
          if (trie.deepest(c) <= skip_len) continue;
          if ((whole & trie.string_classes(c)) && trie.deepest(c) - d <= horizon) {
            for (std::uint32_t i = child.subtree_begin; i < child.subtree_end; ++i) {
              const std::int32_t t = trie.order()[i];
              if (skip_len != 0 &&
                  trie.vocab().tokens[static_cast<std::size_t>(t)].size() <= skip_len)
                continue;
              kind[t] = kAccept;
              touched.push_back(t);
            }
            continue;
          }
          bool uncertain_here = uncertain || (cur.left_context && follow.test(child.byte));
          std::int32_t nid = -1;
          const StackSet* next = nullptr;
          if (id >= 0) nid = next_id[static_cast<std::size_t>(id) * 256 + child.byte];
          if (nid >= 0) {
            next = &states[static_cast<std::size_t>(nid)];
          } else {
            StackSet& stepped = levels[d + 1];
            if (cur.empty()) {
              stepped.clear();
            } else {
              pda.step(cur, child.byte, stepped);
            }
            if (stepped.overflow) {
              // Too many stacks to follow from here (kMaxLiveStacks): the real stacks decide
              // every token below, and the matcher refuses the output if they overflow too.
              for (std::uint32_t i = child.subtree_begin; i < child.subtree_end; ++i) {
                const std::int32_t t = trie.order()[i];
                if (trie.vocab().tokens[static_cast<std::size_t>(t)].size() <= skip_len) continue;
                kind[t] = kUncertain;
                touched.push_back(t);
              }
              continue;
            }
            next = &stepped;
            if (id >= 0) {
              nid = scratch.intern(stepped);
              if (nid >= 0) {
                next_id[static_cast<std::size_t>(id) * 256 + child.byte] = nid;
                next = &states[static_cast<std::size_t>(nid)];
              }
            }
          }
          bool alive = !next->empty() || next->left_context || next->accepted;
          if (child.token >= 0 && d + 1 > skip_len) {
            std::uint8_t k = alive ? kAccept : (uncertain_here ? kUncertain : kReject);
            if (k != kReject) {
              kind[child.token] = k;
              touched.push_back(child.token);
            }
          }
          if (alive) {
            walk(c, d + 1, uncertain_here, nid);
          } else if (uncertain_here) {
            for (std::uint32_t i = child.subtree_begin + (child.token >= 0 ? 1 : 0);
                 i < child.subtree_end; ++i) {
              const std::int32_t t = trie.order()[i];
              if (trie.vocab().tokens[static_cast<std::size_t>(t)].size() <= skip_len) continue;
              kind[t] = kUncertain;
              touched.push_back(t);
            }
          }
        }
      };
  walk(trie.root(), 0, false, scratch.intern(levels[0]));
  if (ref != nullptr) {
    // The short tokens' verdicts: those of the outermost copy.
    auto short_token = [&](std::int32_t t) {
      return trie.vocab().tokens[static_cast<std::size_t>(t)].size() <= skip_len;
    };
    if (!ref->accepted_bits.empty()) {
      for (std::size_t w = 0; w < ref->accepted_bits.size(); ++w)
        for (std::uint32_t bits = ref->accepted_bits[w]; bits != 0; bits &= bits - 1) {
          const auto t =
              static_cast<std::int32_t>(w * 32 + static_cast<std::size_t>(std::countr_zero(bits)));
          if (short_token(t)) {
            kind[t] = kAccept;
            touched.push_back(t);
          }
        }
    } else {
      for (auto t : ref->accepted_ids)
        if (short_token(t)) {
          kind[t] = kAccept;
          touched.push_back(t);
        }
    }
    for (auto ord : ref->uncertain) {
      const std::int32_t t = trie.order()[ord];
      if (short_token(t)) {
        kind[t] = kUncertain;
        touched.push_back(t);
      }
    }
  }

  std::size_t accepted = 0;
  for (auto t : touched)
    accepted += kind[t] == kAccept;
  const std::size_t words = (trie.vocab_size() + 31) / 32;
  const bool use_bits = accepted > words;
  if (use_bits) out.accepted_bits.assign(words, 0);
  for (auto t : touched) {
    if (kind[t] == kAccept) {
      if (use_bits)
        out.accepted_bits[t >> 5] |= 1u << (t & 31);
      else
        out.accepted_ids.push_back(t);
    } else if (kind[t] == kUncertain) {
      out.uncertain.push_back(static_cast<std::uint32_t>(trie.order_index(t)));
    }
    kind[t] = kReject;
  }
  std::sort(out.accepted_ids.begin(), out.accepted_ids.end());
  std::sort(out.uncertain.begin(), out.uncertain.end());
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar,
                               std::size_t max_rollback_tokens)
    : grammar_(std::move(grammar)), max_rollback_(max_rollback_tokens), pda_(grammar_->g_, arena_) {
  StackSet start;
  pda_.start(start);
  if (start.overflow) fail(0);
  history_.push_back(commit(start));
  slot_epoch_.assign(grammar_->mask_count(), 0);
}

void GrammarMatcher::load(const State& s, StackSet& out) const {
  out.clear();
  for (NodeId n : s.tops)
    out.cursors.push_back(Cursor{n, 0, 0});
  out.accepted = s.accepted;
}

GrammarMatcher::State GrammarMatcher::commit(const StackSet& set) {
  State s;
  s.accepted = set.accepted;
  for (const Cursor& c : set.cursors) {
    NodeId n = c.base;
    for (std::uint32_t i = 0; i < c.len; ++i)
      n = arena_.intern(n, set.frames[c.begin + i]);
    s.tops.push_back(n);
  }
  std::sort(s.tops.begin(), s.tops.end());
  s.tops.erase(std::unique(s.tops.begin(), s.tops.end()), s.tops.end());
  return s;
}

void GrammarMatcher::fail(std::size_t at) {
  if (error_) return;
  error_ = Error(ErrorCode::kResourceExhausted,
                 "the grammar is too ambiguous: at byte " + std::to_string(at) +
                     " of the output it had more than " + std::to_string(kMaxLiveStacks) +
                     " ways to continue (the matcher's limit on live stacks), so the output is "
                     "refused");
}

// Runs `bytes` from `set` (replaced by the result); true when some stack survives or the
// grammar matched exactly at the last byte.
bool GrammarMatcher::run_bytes(StackSet& set, std::string_view bytes) {
  StackSet* cur = &set;
  StackSet* next = &b_;
  bool ok = true;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    pda_.step(*cur, static_cast<std::uint8_t>(bytes[i]), *next);
    std::swap(cur, next);
    if (cur->overflow) {
      fail(state().bytes + i + 1);
      ok = false;
      break;
    }
    // Matching the whole grammar before the last byte does not count: bytes remain.
    if (cur->empty() && (i + 1 < bytes.size() || !cur->accepted)) {
      ok = false;
      break;
    }
  }
  if (cur != &set) std::swap(set, *cur);
  return ok;
}

void GrammarMatcher::push_state(State s) {
  history_.push_back(std::move(s));
  while (history_.size() > max_rollback_ + 1)
    history_.pop_front();
}

void GrammarMatcher::fill_next_token_bitmask(std::span<std::uint32_t> words) {
  std::fill(words.begin(), words.end(), 0u);
  const State& s = state();
  if (terminated_) return;
  const auto only_eos = [&] {
    std::fill(words.begin(), words.end(), 0u);
    for (auto id : grammar_->trie().vocab().eos_ids)
      if (static_cast<std::size_t>(id >> 5) < words.size()) words[id >> 5] |= 1u << (id & 31);
  };
  if (error_) return only_eos();
  const auto& cg = *grammar_;
  const TokenTrie& trie = cg.trie();
  if (++epoch_ == 0) {
    std::fill(slot_epoch_.begin(), slot_epoch_.end(), 0u);
    epoch_ = 1;
  }
  seen_slots_.clear();
  for (NodeId n : s.tops) {
    auto ref = cg.mask_index(arena_, n);
    if (ref.bucket == CompiledGrammar::kNoBucket) {
      if (slot_epoch_[ref.index] == epoch_) continue;
      slot_epoch_[ref.index] = epoch_;
    } else if (std::any_of(seen_slots_.begin(), seen_slots_.end(), [&](const auto& r) {
                 return r.index == ref.index && r.bucket == ref.bucket;
               })) {
      continue;
    }
    seen_slots_.push_back(ref);
  }
  const std::size_t n_words = std::min(words.size(), bitmask_words());
  for (const auto& ref : seen_slots_) {
    const auto& m = cg.mask_at(ref);
    if (!m.accepted_bits.empty()) {
      const std::uint32_t* src = m.accepted_bits.data();
      std::uint32_t* dst = words.data();
      for (std::size_t i = 0; i < n_words; ++i)
        dst[i] |= src[i];
    } else {
      for (auto t : m.accepted_ids)
        words[t >> 5] |= 1u << (t & 31);
    }
  }
  // The stack-dependent tokens: one walk over the trie from the stacks at that position,
  // sharing the steps of common prefixes and skipping subtrees with none of them.
  if (levels_.empty()) levels_.resize(trie.max_token_bytes() + 2);
  // Their verdicts depend only on the full stacks, so they are looked up first by those.
  for (const auto& ref : seen_slots_) {
    const auto& m = cg.mask_at(ref);
    if (m.uncertain.empty()) continue;
    StackSet& start = levels_[0];
    start.clear();
    dependent_key_.assign({ref.index, ref.bucket});
    for (NodeId n : s.tops) {
      const auto other = cg.mask_index(arena_, n);
      if (other.index != ref.index || other.bucket != ref.bucket) continue;
      start.cursors.push_back(Cursor{n, 0, 0});
      NodeId p = n;
      for (; p > kContextNode; p = arena_[p].parent) {
        const Frame& f = arena_[p].frame;
        dependent_key_.insert(dependent_key_.end(), {f.rule, f.alt, f.pos, f.count, f.count_span});
      }
      dependent_key_.push_back(~p);  // the bottom, which also ends this stack in the key
    }
    dependent_tokens_.clear();
    if (!cg.find_dependent(dependent_key_, dependent_tokens_)) {
      check_uncertain(trie.root(), 0, m.uncertain);
      if (error_) return only_eos();
      cg.store_dependent(dependent_key_, dependent_tokens_);
    }
    for (auto t : dependent_tokens_)
      words[t >> 5] |= 1u << (t & 31);
  }
  for (auto [tok, owner] : trie.aliases())
    if (words[owner >> 5] >> (owner & 31) & 1) words[tok >> 5] |= 1u << (tok & 31);
  if (s.accepted)
    for (auto id : trie.vocab().eos_ids)
      words[id >> 5] |= 1u << (id & 31);
}

void GrammarMatcher::check_uncertain(std::uint32_t v, std::size_t depth,
                                     const std::vector<std::uint32_t>& ords) {
  const TokenTrie& trie = grammar_->trie();
  const auto& node = trie.node(v);
  for (std::uint32_t ci = 0; ci < node.child_count; ++ci) {
    std::uint32_t c = node.first_child + ci;
    const auto& child = trie.node(c);
    auto it = std::lower_bound(ords.begin(), ords.end(), child.subtree_begin);
    if (it == ords.end() || *it >= child.subtree_end) continue;
    StackSet& next = levels_[depth + 1];
    pda_.step(levels_[depth], child.byte, next);
    if (next.overflow) {
      fail(state().bytes + depth + 1);
      return;
    }
    if (child.token >= 0 && *it == child.subtree_begin && (!next.empty() || next.accepted))
      dependent_tokens_.push_back(child.token);
    if (!next.empty()) check_uncertain(c, depth + 1, ords);
    if (error_) return;
  }
}

bool GrammarMatcher::accept_token(std::int32_t token) {
  if (terminated_ || error_) return false;
  const TokenTrie& trie = grammar_->trie();
  if (token < 0 || static_cast<std::size_t>(token) >= trie.vocab_size()) return false;
  if (trie.is_eos(token)) {
    if (!state().accepted) return false;
    State s;
    s.terminated = true;
    s.bytes = state().bytes;
    push_state(std::move(s));
    terminated_ = true;
    return true;
  }
  if (trie.vocab().special[token]) return false;
  return accept_bytes(trie.vocab().tokens[token]);
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (terminated_ || error_ || bytes.empty()) return false;
  load(state(), a_);
  if (!run_bytes(a_, bytes)) return false;
  State s = commit(a_);
  s.bytes = state().bytes + bytes.size();
  push_state(std::move(s));
  return true;
}

Result<void> GrammarMatcher::rollback(std::size_t k) {
  if (k > history_.size() - 1)
    return Error(ErrorCode::kOutOfRange, "cannot roll back " + std::to_string(k) + " steps: only " +
                                             std::to_string(history_.size() - 1) + " are kept");
  for (std::size_t i = 0; i < k; ++i)
    history_.pop_back();
  terminated_ = state().terminated;
  return {};
}

std::string GrammarMatcher::find_jump_forward_string(std::size_t max_bytes) {
  std::string out;
  if (terminated_ || error_) return out;
  load(state(), a_);
  StackSet* cur = &a_;
  StackSet* next = &b_;
  while (out.size() < max_bytes && !cur->accepted && !cur->empty()) {
    ByteSet possible;
    for (const Cursor& c : cur->cursors)
      possible |= pda_.top_bytes(*cur, c);
    if (possible.count() != 1) break;
    std::uint8_t b = 0;
    while (!possible.test(b))
      ++b;
    pda_.step(*cur, b, *next);
    std::swap(cur, next);
    // The state past this byte is incomplete: stop here; accepting it reports the overflow.
    if (cur->overflow) break;
    out += static_cast<char>(b);
  }
  return out;
}

}  // namespace weft::grammar
