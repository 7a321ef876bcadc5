#pragma once
// The byte-level pushdown automaton over a FlatGrammar. A stack is a chain of frames (rule,
// alternative, position in it); the automaton is nondeterministic, so a state is a set of
// stacks, each with a byte-set element on top. Committed stacks live in a hash-consed arena
// (equal stacks share one node, so a state is a small set of node ids and rollback is just
// keeping old sets); stacks being explored (during mask computation) keep their new frames in
// a scratch pool above an arena node, so exploring never grows the arena.

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
  // At a counted element (Element::counted): how many copies have finished.
  std::uint32_t count = 0;
  bool operator==(const Frame&) const = default;
};

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

 private:
  struct Key {
    std::uint64_t a, b;
    std::uint32_t c;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const {
      return k.a * 0x9E3779B97F4A7C15ull ^ (k.b + (k.a >> 29)) ^
             (std::uint64_t{k.c} * 0xC2B2AE3D27D4EB4Full);
    }
  };
  std::vector<StackNode> nodes_;
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
  void clear() {
    cursors.clear();
    frames.clear();
    accepted = left_context = false;
  }
  bool empty() const { return cursors.empty(); }
};

class Pushdown {
 public:
  Pushdown(const FlatGrammar& grammar, const StackArena& arena) : g_(grammar), arena_(arena) {}

  // The stacks that begin a match of the root rule.
  void start(StackSet& out);
  // Closes the stack `base` + frames over rule references and completed rules, adding every
  // stack with a byte set on top to `out` (deduplicated).
  void expand(NodeId base, const Frame* frames, std::uint32_t len, StackSet& out);
  // Consumes one byte from every stack of `in`.
  void step(const StackSet& in, std::uint8_t byte, StackSet& out);
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
  void emit(const Item& it, StackSet& out);

  const FlatGrammar& g_;
  const StackArena& arena_;
  std::vector<Frame> scratch_;
  std::vector<Item> work_;
  std::vector<Frame> step_frames_;
};

}  // namespace weft::grammar
