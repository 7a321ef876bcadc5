#include "runtime/grammar/grammar_analysis.hpp"

#include <cstdint>
#include <vector>

namespace weft::grammar {
namespace {

// A list per rule, all in one array: rule r's entries are items[begin[r], begin[r + 1]). The
// grammar of a long pattern has thousands of rules, and a vector of its own per rule for each
// relation below was most of the allocations of the analysis.
struct Adjacency {
  std::vector<std::uint32_t> begin;
  std::vector<std::uint32_t> items;

  const std::uint32_t* first(std::uint32_t r) const { return items.data() + begin[r]; }
  const std::uint32_t* last(std::uint32_t r) const { return items.data() + begin[r + 1]; }
};

// `edges(emit)` calls emit(from, to) for every entry, in order; it is called twice (count, then
// fill), so each list keeps the order of the calls.
template <class Edges>
Adjacency make_adjacency(std::size_t n, const Edges& edges) {
  Adjacency a;
  a.begin.assign(n + 1, 0);
  edges([&](std::uint32_t from, std::uint32_t) { ++a.begin[from + 1]; });
  for (std::size_t r = 0; r < n; ++r)
    a.begin[r + 1] += a.begin[r];
  a.items.resize(a.begin[n]);
  std::vector<std::uint32_t> next(a.begin.begin(), a.begin.end() - 1);
  edges([&](std::uint32_t from, std::uint32_t to) { a.items[next[from]++] = to; });
  return a;
}

}  // namespace

// The fixpoints below (nullable, productive, FIRST, FOLLOW) are solved with worklists over the
// rules' dependencies rather than by sweeping every rule until nothing changes: a sweep carries
// a fact one step against the rules' order per pass, so a chain of n rules (a spelt-out
// x{0,n} of an x that may match nothing makes one) took n passes of n rules, seconds for
// n = 3,000 under ASan (tests/fuzz found `(){1,3010}`). Each worklist visits a rule again only
// when something it depends on changed, which a byte set can do at most 256 times.
Result<void> analyse_flat_grammar(FlatGrammar& g) {
  const std::size_t n = g.rules.size();
  // A counted x{0,n} matches the empty string whatever x is, and finishes whatever x does.
  auto nullable_by_count = [](const Element& e) { return e.counted() && e.min == 0; };
  // Every alternative gets an index; uses[b] lists the alternative of each occurrence of rule b
  // whose verdict waits on b.
  std::vector<std::uint32_t> alt_rule;
  std::vector<std::uint32_t> need_nullable, need_productive;
  constexpr std::uint32_t kNever = 0xffffffffu;
  for (std::size_t r = 0; r < n; ++r)
    for (const auto& seq : g.rules[r].alts) {
      alt_rule.push_back(static_cast<std::uint32_t>(r));
      std::uint32_t wait_nullable = 0, wait_productive = 0;
      bool has_bytes = false, has_empty_set = false;
      for (const auto& e : seq) {
        if (!e.is_rule) {
          has_bytes = true;
          if (g.byte_sets[e.index].empty()) has_empty_set = true;
          continue;
        }
        if (!nullable_by_count(e)) ++wait_nullable;
        if (e.min != 0) ++wait_productive;
      }
      need_nullable.push_back(has_bytes ? kNever : wait_nullable);
      need_productive.push_back(has_empty_set ? kNever : wait_productive);
    }
  const Adjacency uses_nullable = make_adjacency(n, [&](const auto& emit) {
    std::uint32_t alt = 0;
    for (const auto& rule : g.rules)
      for (const auto& seq : rule.alts) {
        for (const auto& e : seq)
          if (e.is_rule && !nullable_by_count(e)) emit(e.index, alt);
        ++alt;
      }
  });
  const Adjacency uses_productive = make_adjacency(n, [&](const auto& emit) {
    std::uint32_t alt = 0;
    for (const auto& rule : g.rules)
      for (const auto& seq : rule.alts) {
        for (const auto& e : seq)
          if (e.is_rule && e.min != 0) emit(e.index, alt);
        ++alt;
      }
  });
  // A rule is nullable (productive) once one of its alternatives has every element it waits on
  // nullable (productive) and no byte element (no empty byte set): count down per alternative.
  auto solve = [&](std::vector<std::uint32_t>& need, const Adjacency& uses,
                   std::vector<bool>& mark) {
    std::vector<std::uint32_t> work;
    for (std::size_t a = 0; a < need.size(); ++a)
      if (need[a] == 0 && !mark[alt_rule[a]]) {
        mark[alt_rule[a]] = true;
        work.push_back(alt_rule[a]);
      }
    while (!work.empty()) {
      const std::uint32_t b = work.back();
      work.pop_back();
      for (const std::uint32_t* it = uses.first(b); it != uses.last(b); ++it) {
        const std::uint32_t a = *it;
        if (need[a] == kNever || need[a] == 0) continue;
        if (--need[a] == 0 && !mark[alt_rule[a]]) {
          mark[alt_rule[a]] = true;
          work.push_back(alt_rule[a]);
        }
      }
    }
  };
  g.nullable.assign(n, false);
  std::vector<bool> productive(n, false);
  solve(need_nullable, uses_nullable, g.nullable);
  solve(need_productive, uses_productive, productive);
  for (std::size_t r = 0; r < n; ++r)
    if (!productive[r])
      return Error(ErrorCode::kInvalidArgument,
                   "grammar rule '" + g.rules[r].name +
                       "' can never finish (it matches no string), so no output could satisfy it");
  auto element_nullable = [&](const Element& e) {
    return e.is_rule && (g.nullable[e.index] || nullable_by_count(e));
  };
  // Left recursion: an edge A -> B when B can start A's match. A cycle would make the
  // matcher's closure loop, so it is refused here.
  const Adjacency left = make_adjacency(n, [&](const auto& emit) {
    for (std::size_t r = 0; r < n; ++r)
      for (const auto& seq : g.rules[r].alts)
        for (const auto& e : seq) {
          if (!e.is_rule) break;
          emit(static_cast<std::uint32_t>(r), e.index);
          if (!element_nullable(e)) break;
        }
  });
  std::vector<int> color(n, 0);  // 0 new, 1 on the path, 2 done
  for (std::size_t start = 0; start < n; ++start) {
    if (color[start]) continue;
    std::vector<std::pair<std::uint32_t, std::size_t>> stack{
        {static_cast<std::uint32_t>(start), 0}};
    color[start] = 1;
    while (!stack.empty()) {
      auto& [r, i] = stack.back();
      if (i == left.begin[r + 1] - left.begin[r]) {
        color[r] = 2;
        stack.pop_back();
        continue;
      }
      std::uint32_t next = left.first(r)[i++];
      if (color[next] == 1)
        return Error(ErrorCode::kInvalidArgument,
                     "grammar rule '" + g.rules[next].name +
                         "' is left-recursive (it can begin with itself); rewrite it with "
                         "repetition, e.g. list ::= item (\",\" item)*");
      if (color[next] == 0) {
        color[next] = 1;
        stack.push_back({next, 0});
      }
    }
  }

  // FIRST and FOLLOW sets, used by the mask precomputation to reject tokens that leave a rule
  // with a byte nothing can follow it with. `into[b]` lists the rules whose set takes b's.
  auto propagate = [n](std::vector<ByteSet>& set, std::vector<bool>* end, const Adjacency& into) {
    std::vector<std::uint32_t> work;
    std::vector<bool> queued(n, true);
    for (std::size_t r = n; r-- > 0;)
      work.push_back(static_cast<std::uint32_t>(r));
    while (!work.empty()) {
      const std::uint32_t b = work.back();
      work.pop_back();
      queued[b] = false;
      for (const std::uint32_t* it = into.first(b); it != into.last(b); ++it) {
        const std::uint32_t r = *it;
        const ByteSet before = set[r];
        set[r] |= set[b];
        bool changed = !(before == set[r]);
        if (end && (*end)[b] && !(*end)[r]) (*end)[r] = changed = true;
        if (changed && !queued[r]) {
          queued[r] = true;
          work.push_back(r);
        }
      }
    }
  };
  // FIRST(r) holds the byte sets and the FIRST of the rules that can begin r.
  g.first.assign(n, ByteSet{});
  for (std::size_t r = 0; r < n; ++r)
    for (const auto& seq : g.rules[r].alts)
      for (const auto& e : seq) {
        if (!e.is_rule) g.first[r] |= g.byte_sets[e.index];
        if (!element_nullable(e)) break;
      }
  const Adjacency into = make_adjacency(n, [&](const auto& emit) {
    for (std::size_t r = 0; r < n; ++r)
      for (const auto& seq : g.rules[r].alts)
        for (const auto& e : seq) {
          if (e.is_rule) emit(e.index, static_cast<std::uint32_t>(r));
          if (!element_nullable(e)) break;
        }
  });
  propagate(g.first, nullptr, into);
  // FOLLOW(b) holds, for each occurrence of b, the FIRST of what may come after it (a counted
  // copy may be followed by the next copy) and, where all of that may be empty, FOLLOW of the
  // rule it occurs in (and whether input may end).
  g.follow.assign(n, ByteSet{});
  g.follow_end.assign(n, false);
  g.follow_end[g.root] = true;
  for (std::size_t r = 0; r < n; ++r)
    for (const auto& seq : g.rules[r].alts) {
      ByteSet rest;  // FIRST of seq[i + 1, end)
      for (std::size_t i = seq.size(); i-- > 0;) {
        const Element& e = seq[i];
        if (e.is_rule) {
          g.follow[e.index] |= rest;
          if (e.counted() && e.max > 1) g.follow[e.index] |= g.first[e.index];
        }
        if (element_nullable(e)) {
          rest |= g.first[e.index];
        } else {
          rest = e.is_rule ? g.first[e.index] : g.byte_sets[e.index];
        }
      }
    }
  // `ends[r]` lists the rules that can end r's match (all after them may be empty).
  const Adjacency ends = make_adjacency(n, [&](const auto& emit) {
    for (std::size_t r = 0; r < n; ++r)
      for (const auto& seq : g.rules[r].alts)
        for (std::size_t i = seq.size(); i-- > 0;) {
          const Element& e = seq[i];
          if (e.is_rule) emit(static_cast<std::uint32_t>(r), e.index);
          if (!element_nullable(e)) break;
        }
  });
  propagate(g.follow, &g.follow_end, ends);
  return {};
}

}  // namespace weft::grammar
