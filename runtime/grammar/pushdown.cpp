#include "runtime/grammar/pushdown.hpp"

#include <algorithm>
#include <cstring>

namespace weft::grammar {

StackArena::StackArena() {
  nodes_.push_back(StackNode{kRootNode, Frame{}});
  nodes_.push_back(StackNode{kContextNode, Frame{}});
}

NodeId StackArena::intern(NodeId parent, const Frame& f) {
  Key key{(std::uint64_t{parent} << 32) | f.rule, (std::uint64_t{f.alt} << 32) | f.pos, f.count};
  auto [it, inserted] = index_.try_emplace(key, static_cast<NodeId>(nodes_.size()));
  if (inserted) nodes_.push_back(StackNode{parent, f});
  return it->second;
}

void Pushdown::start(StackSet& out) {
  out.clear();
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

void Pushdown::emit(const Item& it, StackSet& out) {
  for (const Cursor& c : out.cursors) {
    if (c.base != it.base || c.len != it.len) continue;
    if (it.len == 0 ||
        std::memcmp(&out.frames[c.begin], &scratch_[it.begin], it.len * sizeof(Frame)) == 0)
      return;
  }
  Cursor c{it.base, static_cast<std::uint32_t>(out.frames.size()), it.len};
  out.frames.insert(out.frames.end(), scratch_.begin() + it.begin,
                    scratch_.begin() + it.begin + it.len);
  out.cursors.push_back(c);
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
        // so this closure ends.
        if (f.count >= e.min) {
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
          const auto alts = static_cast<std::uint32_t>(g_.rules[e.index].alts.size());
          for (std::uint32_t a = alts; a-- > 0;) {
            Item child = it;
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
