#pragma once
// The byte-level pushdown automaton over a FlatGrammar. A stack is a chain of frames (rule,
// alternative, position in it); the automaton is nondeterministic, so a state is a set of
// stacks, each with a byte-set element on top. Committed stacks live in a hash-consed arena
// (equal stacks share one node, so a state is a small set of node ids and rollback is just
// keeping old sets); stacks being explored (during mask computation) keep their new frames in
// a scratch pool above an arena node, so exploring never grows the arena.
//
// Counted repetitions (Element::counted) keep their count in the frame. An ambiguous one,
// (a|ab|b){0,3000} over "abab...", reaches the same stack with every count between two
// bounds; a frame therefore holds an interval of counts, and stacks that differ only in one
// counted frame's interval are merged where that leaves the language unchanged (Pushdown::emit,
// the argument at merge_counts in pushdown.cpp). A state never holds more than kMaxLiveStacks
// stacks: past it a step reports overflow (the matcher then refuses the output) instead of
// running on at a cost that grows with every byte.

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "runtime/grammar/grammar_compiler.hpp"

namespace weft::grammar {

using NodeId = std::uint32_t;
// Below the root rule's frame: popping to it means the grammar has matched.
inline constexpr NodeId kRootNode = 0;
// An unknown stack: the mask precomputation starts a position above it, and popping to it
// means the token left the rule, so what happens next depends on the real stack.
inline constexpr NodeId kContextNode = 1;

struct Frame {
  std::uint32_t rule = 0;
  std::uint32_t alt = 0;
  std::uint32_t pos = 0;
  // At a counted element (Element::counted): how many copies have finished, any of
  // count..count + count_span (the frame stands for one stack per count of the interval).
  std::uint32_t count = 0;
  std::uint32_t count_span = 0;
  std::uint32_t count_hi() const { return count + count_span; }
  bool operator==(const Frame&) const = default;
};

// The most stacks a state may hold (see the top of this file). Real grammars hold a handful
// (a JSON document's state is one to a few stacks); ambiguous counted repetitions stay small
// once merged; what exceeds this is an exponentially ambiguous grammar, whose next byte would
// cost milliseconds and the one after more.
inline constexpr std::size_t kMaxLiveStacks = 10000;

struct StackNode {
  NodeId parent = 0;
  Frame frame;
};

class StackArena {
 public:
  StackArena();
  NodeId intern(NodeId parent, const Frame& frame);
  const StackNode& operator[](NodeId id) const { return nodes_[id]; }
  std::size_t size() const { return nodes_.size(); }
  // Of the whole stack ending at `id`: a hash of its frames without their counts (`shape`), one
  // with them (`full`), and its depth. Equal stacks have equal hashes whatever node they were
  // reached through, so the pushdown's deduplication can compare stacks held partly in scratch.
  struct Summary {
    std::uint64_t shape = 0, full = 0;
    std::uint32_t depth = 0;
  };
  const Summary& summary(NodeId id) const { return summaries_[id]; }
  static std::uint64_t shape_step(std::uint64_t h, const Frame& f);
  static std::uint64_t full_step(std::uint64_t h, const Frame& f);

 private:
  struct Key {
    std::uint64_t a, b, c;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const {
      return k.a * 0x9E3779B97F4A7C15ull ^ (k.b + (k.a >> 29)) ^ (k.c * 0xC2B2AE3D27D4EB4Full);
    }
  };
  std::vector<StackNode> nodes_;
  std::vector<Summary> summaries_;
  std::unordered_map<Key, NodeId, KeyHash> index_;
};

// A stack being explored: the arena node `base` with `len` more frames above it, stored in the
// owning StackSet's frame pool from `begin`.
struct Cursor {
  NodeId base = kRootNode;
  std::uint32_t begin = 0;
  std::uint32_t len = 0;
};

struct StackSet {
  std::vector<Cursor> cursors;
  std::vector<Frame> frames;
  bool accepted = false;      // some stack popped to kRootNode: the grammar matched here
  bool left_context = false;  // some stack popped to kContextNode
  // More than kMaxLiveStacks stacks: the rest were dropped, so the set is incomplete and must
  // not be used as a state.
  bool overflow = false;
  void clear() {
    cursors.clear();
    frames.clear();
    accepted = left_context = overflow = false;
  }
  bool empty() const { return cursors.empty(); }
};

class Pushdown {
 public:
  Pushdown(const FlatGrammar& grammar, const StackArena& arena);

  // The stacks that begin a match of the root rule.
  void start(StackSet& out);
  // Consumes one byte from every stack of `in`.
  void step(const StackSet& in, std::uint8_t byte, StackSet& out);
  // Tests only: keep every count in its own stack, as before counts were merged, to compare
  // the two on the same inputs.
  void set_merge_counts(bool on) { merge_counts_ = on; }
  // The top frame of cursor `c` of `set`.
  const Frame& top(const StackSet& set, const Cursor& c) const {
    return c.len ? set.frames[c.begin + c.len - 1] : arena_[c.base].frame;
  }
  const ByteSet& top_bytes(const StackSet& set, const Cursor& c) const {
    const Frame& f = top(set, c);
    return g_.byte_sets[g_.rules[f.rule].alts[f.alt][f.pos].index];
  }

 private:
  struct Item {
    NodeId base;
    std::uint32_t begin, len;
  };
  const Frame& item_top(const Item& it) const {
    return it.len ? scratch_[it.begin + it.len - 1] : arena_[it.base].frame;
  }
  void push_frame(Item& it, const Frame& f);
  // The frame after the element at f.pos finished: the next position, or at a counted element
  // one more finished copy.
  void advance(Frame& f) const {
    if (g_.rules[f.rule].alts[f.alt][f.pos].counted()) {
      ++f.count;
    } else {
      ++f.pos;
    }
  }
  // Closes the stack `base` + frames over rule references and completed rules, adding every
  // stack with a byte set on top to `out` (deduplicated and merged, see emit).
  void expand(NodeId base, const Frame* frames, std::uint32_t len, StackSet& out);
  // Adds the stack to `out` unless `out` holds it already, or merges it into a stack of `out`
  // that differs from it only in one counted frame's counts.
  void emit(const Item& it, StackSet& out);
  // A stack read from its top down: `left` frames of `frames`, then the arena from `node`.
  struct View {
    NodeId node;
    const Frame* frames;
    std::uint32_t left;
  };
  View view(const StackSet& set, std::uint32_t cursor) const {
    const Cursor& c = set.cursors[cursor];
    return View{c.base, set.frames.data() + c.begin, c.len};
  }
  // How two stacks of equal depth differ: not at all, only in the counts of the frame `at`
  // frames below the top (their frames there in `a` and `b`), or otherwise.
  struct Difference {
    enum Kind { kSame, kOneCount, kOther } kind = kOther;
    std::uint32_t at = 0;
    Frame a, b;
  };
  Difference compare(View a, View b) const;
  // The stack's hashes without and with counts (StackArena::Summary).
  void summarize(const View& v, std::uint64_t& shape, std::uint64_t& full) const;
  // Whether cursor `i` of `out` holds `mine` already or now (merged into it).
  bool try_merge(StackSet& out, std::uint32_t i, const View& mine);
  // Replaces the frame `at` frames below the top of cursor `i` of `out` (moving the frames down
  // to it from the arena into `out` when they are there).
  void rewrite(StackSet& out, std::uint32_t i, std::uint32_t at, const Frame& frame);
  // Forgets the index of `out`'s stacks (at the start of a step).
  void reset_index();
  void index_add(std::uint32_t i);

  const FlatGrammar& g_;
  const StackArena& arena_;
  std::vector<Frame> scratch_;
  std::vector<Item> work_;
  std::vector<Frame> step_frames_;
  bool merge_counts_ = true;
  // Whether the grammar has a counted element (without one nothing merges).
  bool counted_ = false;
  // Past kIndexAbove stacks in the set being filled, per cursor: hashes without and with counts
  // (StackArena::Summary), indexed, so a step over thousands of stacks does not compare each
  // new one with all the others.
  static constexpr std::size_t kIndexAbove = 32;
  std::vector<std::uint64_t> out_shape_, out_full_;
  std::unordered_multimap<std::uint64_t, std::uint32_t> by_shape_, by_full_;
  bool indexed_ = false;
  std::vector<Frame> rewrite_frames_;
};

}  // namespace weft::grammar
