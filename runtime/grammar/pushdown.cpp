#include "runtime/grammar/pushdown.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

namespace weft::grammar {
namespace {

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h = (h ^ v) * 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 31);
}

// The counts that may still follow a counted frame, as an interval of further copies: a frame
// at element e holding counts [lo, hi], with a copy in progress above it (a counted frame is
// never a top: a copy sits on it until it finishes), finishes that copy and then j more, for
// any j with e.min <= c + 1 + j <= e.max for some c in [lo, hi]; that is j in
// [max(0, e.min - hi - 1), e.max - lo - 1] (lo < e.max: a copy starts only below the maximum).
struct Further {
  std::int64_t lo, hi;
};
Further further(const Element& e, std::uint32_t lo, std::uint32_t hi) {
  const std::int64_t min = e.min, max = e.max == kUnbounded
                                            ? std::numeric_limits<std::int64_t>::max() / 4
                                            : std::int64_t{e.max};
  return Further{std::max<std::int64_t>(0, min - hi - 1), max - lo - 1};
}

// The smallest hi' <= hi with the same further copies as [lo, hi]: only the lower end of
// `further` depends on hi, and it is 0 from hi = e.min - 1 up. So for x{0,n} a frame keeps only
// its lowest count: a higher count may do less, never more.
std::uint32_t canonical_hi(const Element& e, std::uint32_t lo, std::uint32_t hi) {
  if (e.min == 0) return lo;
  return std::min(hi, std::max(lo, e.min - 1));
}

// Merging two stacks that are equal but for the counts [lo1, hi1] and [lo2, hi2] of one counted
// frame (element e), into one with [min lo, max hi]: the language the matcher accepts from a
// set of stacks is the union of each stack's, and a stack P e[lo, hi] T (P below the frame, T
// the copy in progress above it) accepts L(T) X^F L(P'), where X is the repeated item, F the
// further copies above, and P' what follows the element. Concatenation distributes over
// union, so the two stacks accept L(T) X^(F1 u F2) L(P') together, and the merged one
// L(T) X^F L(P') with F = [min F.lo, max F.hi] (`further` is monotone in lo and in hi). That is
// the same language exactly when F1 and F2 overlap or touch; then the merged stack takes
// their place, and the sets before and after accept the same strings from here on, byte for
// byte (a step maps a set to the set of what each stack becomes, so equal languages stay equal:
// each is the other's derivative by the same byte). Counts the two did not hold may enter
// the merged interval; they are harmless for that reason. Masks and jump-forward read only
// what the set accepts, and the precomputed masks that depend on a count read its bucket
// (CompiledGrammar::mask_index), which an interval spanning several buckets does not use.
bool merge_counts(const Element& e, const Frame& a, const Frame& b, Frame& out) {
  const Further fa = further(e, a.count, a.count_hi()), fb = further(e, b.count, b.count_hi());
  if (fa.lo > fb.hi + 1 || fb.lo > fa.hi + 1) return false;
  const std::uint32_t lo = std::min(a.count, b.count);
  const std::uint32_t hi = canonical_hi(e, lo, std::max(a.count_hi(), b.count_hi()));
  out = a;
  out.count = lo;
  out.count_span = hi - lo;
  return true;
}

}  // namespace

std::uint64_t StackArena::shape_step(std::uint64_t h, const Frame& f) {
  return mix(mix(h, std::uint64_t{f.rule} << 32 | f.alt), f.pos);
}

std::uint64_t StackArena::full_step(std::uint64_t h, const Frame& f) {
  return mix(shape_step(h, f), std::uint64_t{f.count} << 32 | f.count_span);
}

StackArena::StackArena() {
  nodes_.push_back(StackNode{kRootNode, Frame{}});
  nodes_.push_back(StackNode{kContextNode, Frame{}});
  summaries_.push_back(Summary{0x5bd1e995ull, 0x5bd1e995ull, 0});
  summaries_.push_back(Summary{0x27d4eb2full, 0x27d4eb2full, 0});
}

NodeId StackArena::intern(NodeId parent, const Frame& f) {
  Key key{(std::uint64_t{parent} << 32) | f.rule, (std::uint64_t{f.alt} << 32) | f.pos,
          (std::uint64_t{f.count} << 32) | f.count_span};
  auto [it, inserted] = index_.try_emplace(key, static_cast<NodeId>(nodes_.size()));
  if (inserted) {
    nodes_.push_back(StackNode{parent, f});
    const Summary& below = summaries_[parent];
    summaries_.push_back(
        Summary{shape_step(below.shape, f), full_step(below.full, f), below.depth + 1});
  }
  return it->second;
}

Pushdown::Pushdown(const FlatGrammar& grammar, const StackArena& arena)
    : g_(grammar), arena_(arena) {
  for (const auto& rule : g_.rules)
    for (const auto& seq : rule.alts)
      for (const Element& e : seq)
        counted_ = counted_ || e.counted();
}

void Pushdown::start(StackSet& out) {
  out.clear();
  reset_index();
  for (std::uint32_t a = 0; a < g_.rules[g_.root].alts.size(); ++a) {
    Frame f{g_.root, a, 0};
    expand(kRootNode, &f, 1, out);
  }
}

void Pushdown::push_frame(Item& it, const Frame& f) {
  if (it.begin + it.len != scratch_.size()) {
    auto begin = static_cast<std::uint32_t>(scratch_.size());
    for (std::uint32_t i = 0; i < it.len; ++i)
      scratch_.push_back(scratch_[it.begin + i]);
    it.begin = begin;
  }
  scratch_.push_back(f);
  ++it.len;
}

void Pushdown::reset_index() {
  out_shape_.clear();
  out_full_.clear();
  if (indexed_) {
    by_shape_.clear();
    by_full_.clear();
    indexed_ = false;
  }
}

void Pushdown::index_add(std::uint32_t i) {
  by_shape_.emplace(out_shape_[i], i);
  by_full_.emplace(out_full_[i], i);
}

Pushdown::Difference Pushdown::compare(View a, View b) const {
  Difference d;
  d.kind = Difference::kSame;
  for (std::uint32_t at = 0;; ++at) {
    // Past the scratch frames, one arena node on both sides: the rest is the same.
    if (a.left == 0 && b.left == 0 && a.node == b.node) return d;
    const bool a_end = a.left == 0 && a.node <= kContextNode;
    const bool b_end = b.left == 0 && b.node <= kContextNode;
    if (a_end || b_end) {
      if (a_end && b_end && a.node == b.node) return d;
      d.kind = Difference::kOther;
      return d;
    }
    const Frame& fa = a.left ? a.frames[a.left - 1] : arena_[a.node].frame;
    const Frame& fb = b.left ? b.frames[b.left - 1] : arena_[b.node].frame;
    if (fa.rule != fb.rule || fa.alt != fb.alt || fa.pos != fb.pos) {
      d.kind = Difference::kOther;
      return d;
    }
    if (fa.count != fb.count || fa.count_span != fb.count_span) {
      if (d.kind != Difference::kSame) {
        d.kind = Difference::kOther;
        return d;
      }
      d.kind = Difference::kOneCount;
      d.at = at;
      d.a = fa;
      d.b = fb;
    }
    if (a.left) {
      --a.left;
    } else {
      a.node = arena_[a.node].parent;
    }
    if (b.left) {
      --b.left;
    } else {
      b.node = arena_[b.node].parent;
    }
  }
}

void Pushdown::rewrite(StackSet& out, std::uint32_t i, std::uint32_t at, const Frame& frame) {
  Cursor& c = out.cursors[i];
  if (at >= c.len) {
    // Bring the arena frames down to the one rewritten into `out`, below this cursor's own
    // (appended anew: a cursor's frames are its own, so the old ones are simply left unused).
    rewrite_frames_.clear();
    NodeId node = c.base;
    for (std::uint32_t k = c.len; k <= at; ++k) {
      rewrite_frames_.push_back(arena_[node].frame);
      node = arena_[node].parent;
    }
    std::reverse(rewrite_frames_.begin(), rewrite_frames_.end());
    rewrite_frames_.insert(rewrite_frames_.end(), out.frames.begin() + c.begin,
                           out.frames.begin() + c.begin + c.len);
    c.base = node;
    c.begin = static_cast<std::uint32_t>(out.frames.size());
    c.len = static_cast<std::uint32_t>(rewrite_frames_.size());
    out.frames.insert(out.frames.end(), rewrite_frames_.begin(), rewrite_frames_.end());
  }
  out.frames[c.begin + c.len - 1 - at] = frame;
  if (indexed_) {
    std::uint64_t shape = 0, full = 0;
    summarize(view(out, i), shape, full);
    out_full_[i] = full;
    by_full_.emplace(full, i);
  }
}

void Pushdown::summarize(const View& v, std::uint64_t& shape, std::uint64_t& full) const {
  const StackArena::Summary& below = arena_.summary(v.node);
  shape = below.shape;
  full = below.full;
  for (std::uint32_t k = 0; k < v.left; ++k) {
    shape = StackArena::shape_step(shape, v.frames[k]);
    full = StackArena::full_step(full, v.frames[k]);
  }
}

bool Pushdown::try_merge(StackSet& out, std::uint32_t i, const View& mine) {
  const Difference d = compare(view(out, i), mine);
  if (d.kind == Difference::kSame) return true;
  if (d.kind != Difference::kOneCount) return false;
  const Element& e = g_.rules[d.a.rule].alts[d.a.alt][d.a.pos];
  Frame both;
  if (!e.counted() || !merge_counts(e, d.a, d.b, both)) return false;
  if (both != d.a) rewrite(out, i, d.at, both);
  return true;
}

void Pushdown::emit(const Item& it, StackSet& out) {
  const View mine{it.base, scratch_.data() + it.begin, it.len};
  const std::uint32_t depth = arena_.summary(it.base).depth + it.len;
  auto depth_of = [&](std::uint32_t i) {
    return arena_.summary(out.cursors[i].base).depth + out.cursors[i].len;
  };
  const auto n = static_cast<std::uint32_t>(out.cursors.size());
  const bool merging = counted_ && merge_counts_;
  std::uint64_t shape = 0, full = 0;
  if (!indexed_) {
    // A small set: held already as the same node and frames (what a step meets), or, in a
    // grammar with counted elements, the same stack split otherwise between the arena and the
    // frames, or one differing in a counted frame's counts that merges with it.
    for (const Cursor& c : out.cursors) {
      if (c.base != it.base || c.len != it.len) continue;
      if (it.len == 0 ||
          std::memcmp(&out.frames[c.begin], &scratch_[it.begin], it.len * sizeof(Frame)) == 0)
        return;
    }
    if (merging)
      for (std::uint32_t i = n; i-- > 0;)
        if (depth_of(i) == depth && try_merge(out, i, mine)) return;
  } else {
    // Past kIndexAbove stacks, by hashes: equal ones (then frame by frame), and those equal
    // but for counts; bounded tries, since giving up a merge is always correct.
    summarize(mine, shape, full);
    for (auto [b, e] = by_full_.equal_range(full); b != e; ++b) {
      const std::uint32_t i = b->second;
      if (out_full_[i] == full && depth_of(i) == depth &&
          compare(view(out, i), mine).kind == Difference::kSame)
        return;
    }
    if (merging) {
      constexpr int kMaxMergeTries = 64;
      int tries = 0;
      for (auto [b, e] = by_shape_.equal_range(shape); b != e && tries < kMaxMergeTries; ++b) {
        const std::uint32_t i = b->second;
        if (out_shape_[i] != shape || depth_of(i) != depth) continue;
        ++tries;
        if (try_merge(out, i, mine)) return;
      }
    }
  }
  if (n >= kMaxLiveStacks) {
    out.overflow = true;
    return;
  }
  out.cursors.push_back(Cursor{it.base, static_cast<std::uint32_t>(out.frames.size()), it.len});
  out.frames.insert(out.frames.end(), scratch_.begin() + it.begin,
                    scratch_.begin() + it.begin + it.len);
  if (indexed_) {
    out_shape_.push_back(shape);
    out_full_.push_back(full);
    index_add(n);
  } else if (n + 1 > kIndexAbove) {
    for (std::uint32_t i = 0; i <= n; ++i) {
      summarize(view(out, i), shape, full);
      out_shape_.push_back(shape);
      out_full_.push_back(full);
      index_add(i);
    }
    indexed_ = true;
  }
}

void Pushdown::expand(NodeId base, const Frame* frames, std::uint32_t len, StackSet& out) {
  scratch_.assign(frames, frames + len);
  work_.clear();
  work_.push_back(Item{base, 0, len});
  // Terminates because the compiler refused left recursion: every rule reference pushed here
  // either consumes a byte first or leads, through finitely many nullable rules, to a pop.
  while (!work_.empty()) {
    Item it = work_.back();
    work_.pop_back();
    for (;;) {
      Frame f = item_top(it);
      const auto& seq = g_.rules[f.rule].alts[f.alt];
      if (f.pos == seq.size()) {
        if (it.len) {
          --it.len;
        } else {
          it.base = arena_[it.base].parent;
        }
        if (it.len == 0 && it.base == kRootNode) {
          out.accepted = true;
          break;
        }
        if (it.len == 0 && it.base == kContextNode) {
          out.left_context = true;
          break;
        }
        // Advance the parent past the reference that just finished (copy on write when the
        // parent is a shared arena node).
        if (it.len) {
          if (it.begin + it.len != scratch_.size()) {
            Frame p = scratch_[it.begin + it.len - 1];
            --it.len;
            advance(p);
            push_frame(it, p);
          } else {
            advance(scratch_[it.begin + it.len - 1]);
          }
        } else {
          Frame p = arena_[it.base].frame;
          it.base = arena_[it.base].parent;
          advance(p);
          it.begin = static_cast<std::uint32_t>(scratch_.size());
          push_frame(it, p);
        }
        continue;
      }
      const Element& e = seq[f.pos];
      if (!e.is_rule) {
        emit(it, out);
        break;
      }
      if (e.counted()) {
        // Another copy above this frame (which stays, to count it), and, once enough copies
        // finished, the element left behind. Each copy consumes a byte before it finishes,
        // so this closure ends. The frame holds the counts [f.count, f.count_hi()]: those at
        // or above e.min may leave, those below e.max start another copy.
        if (f.count_hi() >= e.min) {
          Item after = it;
          if (after.len) {
            --after.len;
          } else {
            after.base = arena_[after.base].parent;
          }
          push_frame(after, Frame{f.rule, f.alt, f.pos + 1, 0});
          work_.push_back(after);
        }
        if (e.max == kUnbounded || f.count < e.max) {
          Item below = it;
          const std::uint32_t hi = canonical_hi(
              e, f.count, e.max == kUnbounded ? f.count_hi() : std::min(f.count_hi(), e.max - 1));
          if (hi != f.count_hi()) {
            Frame kept = f;
            kept.count_span = hi - f.count;
            if (below.len) {
              --below.len;
            } else {
              below.base = arena_[below.base].parent;
            }
            push_frame(below, kept);
          }
          const auto alts = static_cast<std::uint32_t>(g_.rules[e.index].alts.size());
          for (std::uint32_t a = alts; a-- > 0;) {
            Item child = below;
            push_frame(child, Frame{e.index, a, 0, 0});
            work_.push_back(child);
          }
        }
        break;
      }
      // A reference in tail position replaces the frame instead of pushing above it, so
      // right recursion (x* lowered as H ::= x H | "") runs in constant stack depth.
      const bool tail = f.pos + 1 == seq.size();
      const auto alts = static_cast<std::uint32_t>(g_.rules[e.index].alts.size());
      for (std::uint32_t a = alts; a-- > 0;) {
        Item child = it;
        if (tail) {
          if (child.len) {
            --child.len;
          } else {
            child.base = arena_[child.base].parent;
          }
        }
        push_frame(child, Frame{e.index, a, 0});
        work_.push_back(child);
      }
      break;
    }
  }
}

void Pushdown::step(const StackSet& in, std::uint8_t byte, StackSet& out) {
  out.clear();
  reset_index();
  std::vector<Frame>& frames = step_frames_;
  for (const Cursor& c : in.cursors) {
    const Frame& f = top(in, c);
    const Element& e = g_.rules[f.rule].alts[f.alt][f.pos];
    if (!g_.byte_sets[e.index].test(byte)) continue;
    NodeId base = c.base;
    frames.assign(in.frames.begin() + c.begin, in.frames.begin() + c.begin + c.len);
    if (frames.empty()) {
      frames.push_back(arena_[base].frame);
      base = arena_[base].parent;
    }
    ++frames.back().pos;
    expand(base, frames.data(), static_cast<std::uint32_t>(frames.size()), out);
  }
}

}  // namespace weft::grammar
